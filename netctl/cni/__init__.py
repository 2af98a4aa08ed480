"""The CNI protocol: versions and result conversion, configs, validation, invoking plugins."""
