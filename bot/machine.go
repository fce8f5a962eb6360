package bot

import "os"

// MachineID names this machine and PID namespace as the store's owners
// record it (store.Owner.Machine): hostname, boot id and PID namespace, or ""
// when any part is unknown. An adapter that registers an owner of its own
// (the Matrix sync lease) sets it so that a process on the same machine that
// sees the pid gone frees its leases at once.
func MachineID() string {
	host, _ := os.Hostname()
	return machineID(host)
}
