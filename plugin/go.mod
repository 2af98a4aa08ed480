// The thin CNI plugin (netctl-cni, netctl-ipam): Go's standard library only.
module netctl.invalid/plugin

go 1.19
