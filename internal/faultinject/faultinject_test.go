package faultinject

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tab, err := parse(" before-commit@3, state-upload ,")
	if err != nil {
		t.Fatal(err)
	}
	if len(tab) != 2 || tab[BeforeCommit].at != 3 || tab[StateUpload].at != 1 {
		t.Fatalf("parse = %+v", tab)
	}
	for v, want := range map[string]string{
		"nope":             `unknown point "nope"`,
		"before-commit@0":  "@0 is not a hit number",
		"state-upload@x":   "@x is not a hit number",
		"before-commit@-1": "@-1 is not a hit number",
	} {
		if _, err := parse(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parse(%q) = %v, want an error containing %q", v, err, want)
		}
	}
}

// An armed point fires at its N-th hit and only then; other points never do.
func TestHitFiresAtTheNthHit(t *testing.T) {
	tab, err := parse(BeforeCommit + "@3")
	if err != nil {
		t.Fatal(err)
	}
	oldTable, oldKill := table, kill
	t.Cleanup(func() { table, kill = oldTable, oldKill })
	table = func() map[string]*armed { return tab }
	kills := 0
	kill = func() { kills++ }
	for i := 1; i <= 5; i++ {
		Hit(BeforeCommit)
		Hit(StateUpload)
		if want := map[bool]int{true: 1, false: 0}[i >= 3]; kills != want {
			t.Fatalf("after %d hits: %d kills, want %d", i, kills, want)
		}
	}
}
