//go:build faults && race

package faults

// raceEnabled: the replicas are built with -race too, so that a data race a
// fault provokes in the service fails the test.
const raceEnabled = true
