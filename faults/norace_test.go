//go:build faults && !race

package faults

const raceEnabled = false
