-- netctl journal, version 9: device networks (netctl/engine/devices.py).
--
-- An attachment of a NAD annotated k8s.v1.cni.cncf.io/resourceName holds one device of
-- that resource the pod was allocated (by the kubelet through a device plugin, or through
-- a ResourceClaim): the resource and the device id are written with the attachment's
-- first row, so "who had this device when" (netctl journal --device ID) is answered from
-- created_at and removed_at, and a DEL on a later day needs nothing else.

ALTER TABLE attachments ADD COLUMN device_resource TEXT NOT NULL DEFAULT '';
ALTER TABLE attachments ADD COLUMN device_id TEXT NOT NULL DEFAULT '';
CREATE INDEX attachments_device ON attachments (device_id) WHERE device_id != '';
