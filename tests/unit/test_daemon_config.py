"""We test these aspects of the daemon's settings (``load_config``):

- defaults without a file;
- a YAML file with kebab-case, camelCase and snake_case keys, and a JSON file;
- flags override the file; flags left unset (None) do not;
- the reconcile on events: on by default, watching ``/run/netns`` and ``/var/run/netns``;
  switched off, and other netns dirs, from a file;
- ``journal-log`` from a file or ``--journal-log``;
- an unknown key, a wrong type or a broken file is refused, naming the key or file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from netctl.errors import INVALID_CONFIG, CNIError
from netctl.settings import DaemonConfig, load_config

YAML = """\
# netctl daemon settings
state-dir: /srv/netctl/state
socket: /srv/netctl/run/netctl.sock
cniBinDir: /opt/cni/bin:/usr/lib/cni:/extra
networksDir: /srv/netctl/networks.d
log-level: debug
pluginTimeout: 5
max_concurrent: 4
allowed-uids: [0, 1000]
"""


def test_defaults() -> None:
    cfg = load_config(None, {})
    assert cfg == DaemonConfig()
    assert cfg.state_dir == "/var/lib/netctl" and cfg.socket == "/run/netctl/netctl.sock"
    assert cfg.bin_dirs == ["/opt/cni/bin", "/usr/lib/cni"]
    assert cfg.networks_dir == "/etc/netctl/networks.d"
    assert cfg.kubeconfig is None and cfg.in_cluster is False


def test_yaml_file_with_mixed_key_styles(tmp_path: Path) -> None:
    path = tmp_path / "netctl.yaml"
    path.write_text(YAML)
    cfg = load_config(str(path), {})
    assert cfg.state_dir == "/srv/netctl/state"
    assert cfg.socket == "/srv/netctl/run/netctl.sock"
    assert cfg.bin_dirs == ["/opt/cni/bin", "/usr/lib/cni", "/extra"]
    assert cfg.networks_dir == "/srv/netctl/networks.d"
    assert cfg.log_level == "debug"
    assert cfg.plugin_timeout == 5.0 and isinstance(cfg.plugin_timeout, float)
    assert cfg.max_concurrent == 4
    assert cfg.allowed_uids == (0, 1000)
    assert cfg.drain_timeout == DaemonConfig().drain_timeout  # untouched keys keep defaults


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "netctl.json"
    path.write_text('{"state-dir": "/s", "inCluster": false, "metrics-addr": "127.0.0.1:9"}')
    cfg = load_config(str(path), {})
    assert (cfg.state_dir, cfg.in_cluster, cfg.metrics_addr) == ("/s", False, "127.0.0.1:9")


def test_reconcile_events_settings(tmp_path: Path) -> None:
    cfg = load_config(None, {})
    assert cfg.reconcile_events is True
    assert cfg.netns_dirs == ("/run/netns", "/var/run/netns")
    path = tmp_path / "netctl.yaml"
    path.write_text("reconcile-events: false\nnetns-dirs: [/run/netns, /run/user-netns]\n")
    cfg = load_config(str(path), {})
    assert cfg.reconcile_events is False
    assert cfg.netns_dirs == ("/run/netns", "/run/user-netns")


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "netctl.yaml"
    path.write_text(YAML)
    flags = {"state_dir": "/flag/state", "socket": None, "cni_bin_dir": "/flag/bin",
             "networks_dir": None, "kubeconfig": None, "in_cluster": None,
             "node_name": "node-7", "metrics_addr": None, "log_level": "warning"}
    cfg = load_config(str(path), flags)
    assert cfg.state_dir == "/flag/state" and cfg.bin_dirs == ["/flag/bin"]
    assert cfg.log_level == "warning" and cfg.node_name == "node-7"
    assert cfg.socket == "/srv/netctl/run/netctl.sock"  # None: the file's value stays
    assert cfg.networks_dir == "/srv/netctl/networks.d"
    assert cfg.max_concurrent == 4


def test_flags_without_a_file() -> None:
    cfg = load_config(None, {"state_dir": "/tmp/x", "socket": None})
    assert cfg.state_dir == "/tmp/x" and cfg.socket == DaemonConfig().socket


@pytest.mark.parametrize("key", ["state-dri", "stateDirectory", "bogus_key"])
def test_unknown_key_refused(tmp_path: Path, key: str) -> None:
    path = tmp_path / "netctl.yaml"
    path.write_text(f"state-dir: /s\n{key}: 1\n")
    with pytest.raises(CNIError) as info:
        load_config(str(path), {})
    assert info.value.code == INVALID_CONFIG
    assert f"unknown key {key!r}" in info.value.msg and str(path) in info.value.msg


@pytest.mark.parametrize(("text", "words"), [
    ("- a\n- b\n", "not a mapping"),
    ("state-dir: [unclosed\n", "netctl.yaml"),
    ("max-concurrent: many\n", "max_concurrent"),
])
def test_bad_files_refused(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "netctl.yaml"
    path.write_text(text)
    with pytest.raises(CNIError) as info:
        load_config(str(path), {})
    assert info.value.code == INVALID_CONFIG
    assert words in info.value.msg


def test_missing_file_refused(tmp_path: Path) -> None:
    with pytest.raises(CNIError) as info:
        load_config(str(tmp_path / "absent.yaml"), {})
    assert info.value.code == INVALID_CONFIG and "absent.yaml" in info.value.msg


def test_metrics_addr_checked_when_loaded() -> None:
    assert load_config(None, {"metrics_addr": "127.0.0.1:9100"}).metrics_addr == "127.0.0.1:9100"
    with pytest.raises(CNIError) as err:
        load_config(None, {"metrics_addr": "9100"})
    assert err.value.code == INVALID_CONFIG and "HOST:PORT" in err.value.msg


def test_journal_log_from_a_file_or_the_flag(tmp_path: Path) -> None:
    from netctl.commands.cli import build_parser

    assert load_config(None, {}).journal_log is False
    path = tmp_path / "netctl.yaml"
    path.write_text("journal-log: true\n")
    assert load_config(str(path), {}).journal_log is True
    args = build_parser().parse_args(["daemon", "--journal-log"])
    assert load_config(None, {"journal_log": args.journal_log}).journal_log is True
