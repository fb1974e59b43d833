package pgtest

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// KeyValues reads the rows of a query selecting (id bigint, v bigint) as id → v: a table's
// state for comparing two tables.
func KeyValues(ctx context.Context, conn *pgx.Conn, sql string) (map[int64]int64, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	out := map[int64]int64{}
	var id, v int64
	_, err = pgx.ForEachRow(rows, []any{&id, &v}, func() error { out[id] = v; return nil })
	return out, err
}

// DiffKeyValues describes how got differs from want (at most five ids); "" when they are equal.
func DiffKeyValues(got, want map[int64]int64) string {
	var d []string
	for id, v := range want {
		if g, ok := got[id]; !ok || g != v {
			d = append(d, fmt.Sprintf("id %d: %d (present %v), want %d", id, g, ok, v))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			d = append(d, fmt.Sprintf("id %d: present, want absent", id))
		}
	}
	if len(d) > 5 {
		d = append(d[:5], fmt.Sprintf("… %d more", len(d)-5))
	}
	return strings.Join(d, "; ")
}
