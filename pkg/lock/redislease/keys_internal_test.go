package redislease

import "testing"

func TestSlotFollowsTheClusterSpec(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31C3 % 16384}, // the CRC16/XMODEM check value
		{"foo", 12182},
		{"{user1000}.following", 3443},
		{"{sku:A-1}:lock", slot("sku:A-1")},
		{"{}x", slot("{}x")}, // an empty tag hashes the whole key
	} {
		if got := slot(tc.key); got != tc.want {
			t.Errorf("slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	k := Keys{}
	if slot(k.Lock("A-1")) != slot(k.Fence("A-1")) {
		t.Error("a resource's lock and fence keys are in different slots")
	}
	if k.Slot("A-1") != slot(k.Lock("A-1")) || k.Slot("A-1") != slot("sku:A-1") {
		t.Errorf("Keys.Slot(A-1) = %d, the lock key's slot %d", k.Slot("A-1"), slot(k.Lock("A-1")))
	}
}
