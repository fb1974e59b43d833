package minicluster

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goflink/goflink/client"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOddEvenFinishes(t *testing.T) {
	c, err := Start(Options{TaskManagers: 2, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	spec := `name: odd-even
parallelism: 2
operators:
  - {name: numbers, type: sequence, from: 1, to: 1000}
  - {name: parity,  type: map, fields: {parity: "value % 2 == 0 ? 'even' : 'odd'", value: "value"}}
  - {name: by-parity, type: key-by, key: "parity"}
  - {name: sum_odd_even, type: sum, field: value}
  - {name: out, type: file, path: ` + out + `}
`
	cl, err := client.New(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec)})
	if err != nil {
		t.Fatal(err)
	}
	last, err := cl.Watch(ctx, id, func(*pb.JobDetails) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v: %s", last.GetStatus(), last.GetFailureCause())
	}
	final := map[string]int64{}
	files, _ := filepath.Glob(filepath.Join(out, "part-*"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r struct {
				Parity string `json:"parity"`
				Value  int64  `json:"value"`
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			final[r.Parity] = max(final[r.Parity], r.Value)
		}
		fh.Close()
	}
	if final["odd"] != 250000 || final["even"] != 250500 {
		t.Errorf("final sums = %v, want odd 250000 even 250500", final)
	}
}
