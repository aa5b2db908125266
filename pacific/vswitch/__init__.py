"""pacific-vswitch: Open vSwitch (ovsdb-server, ovs-vswitchd) and ovn-controller
of one node, run from Pacific's image by deploy/vswitch.yaml (decision 0049)."""
