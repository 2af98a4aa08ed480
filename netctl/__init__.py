"""netctl: a node network controller behind a thin CNI plugin."""

__version__ = "0.1.0"

# Where netctl's things are on a node, by default: the daemon's settings
# (netctl/settings.py) and the commands' flags (netctl/commands/cli.py) both start here.
DEFAULT_STATE_DIR = "/var/lib/netctl"  # the journal: <state-dir>/journal.db
DEFAULT_SOCKET = "/run/netctl/netctl.sock"  # the daemon's socket (the thin plugin's too)
DEFAULT_CNI_BIN_DIRS = "/opt/cni/bin:/usr/lib/cni"  # where delegates are found
DEFAULT_CNI_CONF_DIR = "/etc/cni/net.d"  # the runtime's CNI configs
DEFAULT_NETWORKS_DIR = "/etc/netctl/networks.d"  # standalone mode's NAD files
