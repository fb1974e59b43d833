package pgtest

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStart: the server answers User with Password over TCP and refuses a wrong password, has
// the test's database, the settings the sinks need, and is gone with its directory after Stop.
func TestStart(t *testing.T) {
	s := Start(t)
	conn := s.Connect(t)
	for setting, want := range map[string]string{
		"wal_level":                 "logical",
		"max_prepared_transactions": "64",
		"listen_addresses":          "127.0.0.1",
	} {
		var got string
		if err := conn.QueryRow(t.Context(), "SELECT current_setting($1)", setting).Scan(&got); err != nil {
			t.Fatalf("current_setting(%s): %v", setting, err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	var db string
	if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil || db != "test" {
		t.Errorf("current_database() = %q, %v; want test", db, err)
	}

	_, err := pgx.Connect(t.Context(), s.DSNFor(User, "wrong", s.Database))
	if err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("connect with a wrong password: %v, want password authentication failed", err)
	}

	s.Stop()
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("after Stop, %s: %v, want it removed", s.Dir, err)
	}
	if c, err := pgx.Connect(context.Background(), s.DSN("postgres")); err == nil {
		_ = c.Close(context.Background())
		t.Error("connect after Stop succeeded")
	}
	s.Stop() // idempotent
}

// TestRunTwice: two servers run side by side (distinct ports and directories).
func TestRunTwice(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Port == b.Port || a.Dir == b.Dir {
		t.Errorf("two servers share port %d/%d or directory %s/%s", a.Port, b.Port, a.Dir, b.Dir)
	}
}

// TestMissingBinaries: without the server's binaries Run fails, saying how to install them.
func TestMissingBinaries(t *testing.T) {
	t.Setenv("PG_BIN", t.TempDir())
	s, err := Run()
	if s != nil {
		s.Stop()
	}
	if err == nil || !strings.Contains(err.Error(), InstallCommand) {
		t.Errorf("Run without binaries: %v, want an error naming %q", err, InstallCommand)
	}
}
