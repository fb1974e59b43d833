package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/minicluster"
	"github.com/goflink/goflink/minicluster/miniclustertest"
	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// TestDefaultCheckpointDirIsTheJobManagersOwn: a job that sets no execution.checkpointing.dir
// checkpoints into <JobManager data dir>/checkpoints, created 0700, not into a directory under
// the world-writable /tmp that any local user could have created first.
func TestDefaultCheckpointDirIsTheJobManagersOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dataDir := t.TempDir()
	_, cl := miniclustertest.StartT(t, minicluster.Options{DataDir: dataDir})
	id := submit(t, ctx, cl, `name: default-checkpoint-dir
config:
  execution.checkpointing.interval: 1 h
operators:
  - {name: numbers, type: sequence, from: 1, rate: 100}
  - {name: out, type: discard}
`)
	waitRunning(t, ctx, cl, id, 1)
	cp, err := cl.TriggerCheckpoint(ctx, id)
	if err != nil {
		t.Fatalf("TriggerCheckpoint() = %v", err)
	}
	root := filepath.Join(dataDir, "jobmanager", "checkpoints")
	if _, err := os.Stat(filepath.Join(root, id, "chk-"+strconv.FormatInt(cp.GetId(), 10), "_metadata")); err != nil {
		t.Errorf("checkpoint %d is not in the JobManager's data dir: %v", cp.GetId(), err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("%s has mode %v, want 0700 (only the JobManager's user may read or change checkpoints)", root, perm)
	}
	if _, err := os.Stat(filepath.Join(os.TempDir(), "goflink-checkpoints", id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the job's checkpoints are (also) under %s: %v", os.TempDir(), err)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id)
}

// confinedCluster starts a cluster whose processes allow jobs the directory allowed alone.
func confinedCluster(t *testing.T, allowed string, opts minicluster.Options) *client.Client {
	t.Helper()
	opts.Settings = config.New()
	if err := opts.Settings.Set(config.AllowedPaths, allowed); err != nil {
		t.Fatal(err)
	}
	_, cl := miniclustertest.StartT(t, opts)
	return cl
}

// checkRefused checks that err is a status with code whose message says every want.
func checkRefused(t *testing.T, what string, err error, code codes.Code, want ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s = %v (code %v), want code %v", what, err, status.Code(err), code)
	}
	msg := status.Convert(err).Message()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: message %q does not say %q", what, msg, w)
		}
	}
}

// TestSubmitConfinesLocalPaths: every local path a job names — a file sink's directory, a
// Kafka connector's ssl.*.location files, the checkpoint and savepoint directories the job
// sets, the snapshot it restores — must lie in the JobManager's io.allowed-paths once
// symlinks and ".." are resolved; otherwise the submission is refused, naming the operator,
// the field and the allowed paths, and nothing is recorded.
func TestSubmitConfinesLocalPaths(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	allowed, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(allowed, "escape")); err != nil {
		t.Fatal(err)
	}
	// Not /dev/zero: a build without confinement would read it until memory runs out.
	caOutside := filepath.Join(outside, "ca.pem")
	if err := os.WriteFile(caOutside, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl := confinedCluster(t, allowed, minicluster.Options{})
	const source = "  - {name: numbers, type: sequence, from: 1, to: 10}\n"
	for _, tc := range []struct {
		name, spec, restore string
		want                []string
	}{
		{name: "file sink outside", spec: fmt.Sprintf("name: j\noperators:\n%s  - {name: out, type: file, path: %s}\n", source, filepath.Join(outside, "out")),
			want: []string{`operator "out" (line 4), field path`, filepath.Join(outside, "out")}},
		{name: "file sink escaping with ..", spec: fmt.Sprintf("name: j\noperators:\n%s  - {name: out, type: file, path: %s/../%s/out}\n", source, allowed, filepath.Base(outside)),
			want: []string{`operator "out" (line 4), field path`}},
		{name: "file sink escaping through a symlink", spec: fmt.Sprintf("name: j\noperators:\n%s  - {name: out, type: file, path: %s/escape/out}\n", source, allowed),
			want: []string{`operator "out" (line 4), field path`, "resolved: " + filepath.Join(outside, "out")}},
		{name: "kafka CA file", spec: fmt.Sprintf("name: j\noperators:\n  - {name: in, type: kafka, brokers: [127.0.0.1:1], topic: t, properties: {security.protocol: SSL, ssl.ca.location: %s}}\n  - {name: out, type: file, path: %s/out}\n", caOutside, allowed),
			want: []string{`operator "in" (line 3), field properties.ssl.ca.location`, caOutside}},
		{name: "checkpoint directory of the job", spec: fmt.Sprintf("name: j\nconfig:\n  execution.checkpointing.interval: 1 s\n  execution.checkpointing.dir: %s\noperators:\n%s  - {name: out, type: discard}\n", outside, source),
			want: []string{"config key execution.checkpointing.dir", outside}},
		{name: "savepoint directory of the job", spec: fmt.Sprintf("name: j\nconfig:\n  execution.checkpointing.savepoint-dir: %s\noperators:\n%s  - {name: out, type: discard}\n", outside, source),
			want: []string{"config key execution.checkpointing.savepoint-dir", outside}},
		{name: "restore path", restore: filepath.Join(outside, "savepoint-x"),
			spec: fmt.Sprintf("name: j\nconfig:\n  execution.checkpointing.interval: 1 s\noperators:\n%s  - {name: out, type: discard}\n", source),
			want: []string{"restore path (-s)", filepath.Join(outside, "savepoint-x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(tc.spec), RestorePath: tc.restore})
			checkRefused(t, "Submit", err, codes.PermissionDenied, append(tc.want, "path not allowed", "io.allowed-paths ["+allowed+"]")...)
			if jobs, err := cl.List(ctx); err != nil || len(jobs) != 0 {
				t.Errorf("List() after a refused submission = %v, %v; want no jobs", jobs, err)
			}
		})
	}
	if entries, err := os.ReadDir(outside); err != nil || len(entries) != 1 {
		t.Errorf("the refused jobs wrote into %s: %v, %v; want ca.pem alone", outside, entries, err)
	}

	// Inside the allowed directory the same job runs; its savepoints stay confined too.
	id := submit(t, ctx, cl, fmt.Sprintf("name: ok\nconfig:\n  execution.checkpointing.interval: 1 h\n  execution.checkpointing.dir: %s/cp\noperators:\n"+
		"  - {name: numbers, type: sequence, from: 1, rate: 100}\n  - {name: out, type: file, path: %s/in/../out}\n", allowed, allowed))
	waitRunning(t, ctx, cl, id, 1)
	_, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: outside})
	checkRefused(t, "TriggerSavepoint(outside)", err, codes.PermissionDenied, "savepoint directory", outside, "io.allowed-paths")
	err = cl.DisposeSavepoint(ctx, filepath.Join(outside, "savepoint-x"))
	checkRefused(t, "DisposeSavepoint(outside)", err, codes.PermissionDenied, "savepoint path", outside, "io.allowed-paths")
	sp, err := cl.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{JobId: id, TargetDirectory: filepath.Join(allowed, "sp")})
	if err != nil {
		t.Fatalf("TriggerSavepoint(allowed) = %v", err)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id)
	if err := cl.DisposeSavepoint(ctx, sp.GetSavepointPath()); err != nil {
		t.Errorf("DisposeSavepoint(allowed) = %v", err)
	}
}

// TestSubmitRefusesASinkDirectoryInUse: a directory holds the output of one sink. A job whose
// sink names the directory of another of its sinks, or of a sink of a job that has not ended
// (however the path is spelled), is refused: it would delete that sink's pending files as
// lingering ones. Once the other job ended, the directory is free.
func TestSubmitRefusesASinkDirectoryInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Symlink(dir, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	cl := confinedCluster(t, dir, minicluster.Options{Slots: 2})
	spec := func(name string, paths ...string) string {
		s := fmt.Sprintf("name: %s\nconfig:\n  execution.checkpointing.interval: 200ms\n  execution.checkpointing.dir: %s/cp\noperators:\n  - {name: numbers, type: sequence, from: 1, rate: 100}\n", name, dir)
		for i, p := range paths {
			s += fmt.Sprintf("  - {name: out%d, type: file, inputs: [numbers], path: %s}\n", i, p)
		}
		return s
	}
	_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec("twice", out, out+"/."))})
	checkRefused(t, "Submit(two sinks, one directory)", err, codes.FailedPrecondition,
		"sink directory in use", `operator "out1"`, `also the output of operator "out0"`)

	first := submit(t, ctx, cl, spec("first", out))
	waitRunning(t, ctx, cl, first, 1)
	for _, p := range []string{out, filepath.Join(dir, "link", "out"), dir + "/cp/../out"} {
		_, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: []byte(spec("second", p))})
		checkRefused(t, "Submit(second job, "+p+")", err, codes.FailedPrecondition,
			"sink directory in use", `operator "out0"`, "of job "+first+" (first), which is RUNNING")
	}
	if err := cl.Cancel(ctx, first); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, first)
	second := submit(t, ctx, cl, spec("second", out))
	waitRunning(t, ctx, cl, second, 1)
	if err := cl.Cancel(ctx, second); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, second)
}

// TestTaskManagerConfinesPathsItself: a TaskManager checks the paths of a task's job against
// its own io.allowed-paths before it builds or opens any operator, whatever the JobManager
// allowed: the TaskManager's setting is what counts on its machine. A refusal fails the job
// (a restart would be refused again), naming the operator, the field and the TaskManager's
// allowed directories, and nothing is written or read outside.
func TestTaskManagerConfinesPathsItself(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	tmAllowed, jmOnly := t.TempDir(), t.TempDir()
	ca := filepath.Join(jmOnly, "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmSettings := config.New()
	if err := tmSettings.Set(config.AllowedPaths, tmAllowed); err != nil {
		t.Fatal(err)
	}
	// The JobManager allows the whole temporary directory (StartT's default).
	_, cl := miniclustertest.StartT(t, minicluster.Options{TaskManagerSettings: tmSettings})
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{name: "file sink", spec: fmt.Sprintf("name: j\noperators:\n  - {name: numbers, type: sequence, from: 1, to: 10}\n  - {name: out, type: file, path: %s/out}\n", jmOnly),
			want: []string{`operator "out"`, "field path", filepath.Join(jmOnly, "out")}},
		{name: "kafka CA file", spec: fmt.Sprintf("name: j\noperators:\n  - {name: in, type: kafka, brokers: [127.0.0.1:1], topic: t, properties: {security.protocol: SSL, ssl.ca.location: %s}}\n  - {name: out, type: discard}\n", ca),
			want: []string{`operator "in"`, "field properties.ssl.ca.location", ca}},
		{name: "checkpoint directory of the job", spec: fmt.Sprintf("name: j\nconfig:\n  execution.checkpointing.interval: 1 h\n  execution.checkpointing.dir: %s/cp\noperators:\n  - {name: numbers, type: sequence, from: 1, to: 10}\n  - {name: out, type: discard}\n", jmOnly),
			want: []string{"config key execution.checkpointing.dir", filepath.Join(jmOnly, "cp")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := submit(t, ctx, cl, tc.spec)
			last := watchEnd(t, ctx, cl, id)
			if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED || last.GetRestarts() != 0 {
				t.Fatalf("job ended %v after %d restarts (%s), want FAILED without restarts", last.GetStatus(), last.GetRestarts(), last.GetFailureCause())
			}
			for _, w := range append(tc.want, "path not allowed on this taskmanager", "io.allowed-paths ["+tmAllowed+"]") {
				if !strings.Contains(last.GetFailureCause(), w) {
					t.Errorf("failure cause %q does not say %q", last.GetFailureCause(), w)
				}
			}
		})
	}
	if entries, err := os.ReadDir(jmOnly); err != nil || len(entries) != 1 {
		t.Errorf("the refused tasks wrote into %s: %v, %v; want ca.pem alone", jmOnly, entries, err)
	}
}

// TestSinkDirectoryHeldAcrossClusters: the JobManager's check at submit knows its own jobs
// only; a job of another cluster (or one that slipped past the check) pointed at the
// directory of a running job's file sink is refused by its TaskManager before its sink
// deletes anything — the running job's pending files would be deleted as lingering ones —
// and the running job goes on unharmed.
func TestSinkDirectoryHeldAcrossClusters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	out := filepath.Join(t.TempDir(), "out")
	_, first := miniclustertest.StartT(t, minicluster.Options{})
	_, second := miniclustertest.StartT(t, minicluster.Options{})
	spec := func(name, extra string) string {
		return fmt.Sprintf("name: %s\nconfig:\n  execution.checkpointing.interval: 100ms\n%soperators:\n"+
			"  - {name: numbers, type: sequence, from: 1, rate: 200}\n  - {name: out, type: file, path: %s}\n", name, extra, out)
	}
	running := submit(t, ctx, first, spec("running", ""))
	waitRunning(t, ctx, first, running, 1)
	if _, err := first.TriggerCheckpoint(ctx, running); err != nil {
		t.Fatal(err)
	}

	intruder := submit(t, ctx, second, spec("intruder", "  restart-strategy.type: none\n"))
	last := watchEnd(t, ctx, second, intruder)
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("job of the other cluster ended %v (%s), want FAILED: its sink must not write into a running job's directory", last.GetStatus(), last.GetFailureCause())
	}
	for _, w := range []string{"file sink", "directory in use", out, `operator "out" of job ` + running + ", which is running"} {
		if !strings.Contains(last.GetFailureCause(), w) {
			t.Errorf("failure cause %q does not say %q", last.GetFailureCause(), w)
		}
	}

	// The running job lost nothing: its next checkpoints complete, it never restarted, and
	// what it committed is 1, 2, … each once.
	for range 2 {
		if _, err := first.TriggerCheckpoint(ctx, running); err != nil {
			t.Fatalf("checkpoint of the running job after the intrusion: %v", err)
		}
	}
	d, err := first.Job(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	if d.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING || d.GetRestarts() != 0 {
		t.Errorf("running job is %v after %d restarts (%s), want RUNNING without restarts", d.GetStatus(), d.GetRestarts(), d.GetFailureCause())
	}
	if err := first.Cancel(ctx, running); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, first, running)
	values := committedValues(t, out)
	for v := int64(1); v <= int64(len(values)); v++ {
		if values[v] != 1 {
			t.Fatalf("committed output holds %d %d times, want once (values 1..%d each once): %v", v, values[v], len(values), values)
		}
	}
	if len(values) == 0 {
		t.Errorf("the running job committed nothing")
	}
}

// TestTaskManagerScratchFilesInDataDir: a TaskManager keeps its tasks' working files (the
// bbolt backend's database) in its data dir, not in the shared temporary directory; a task's
// are removed when it ends, the process's when it closes, and those a process that died left
// behind when the next one starts on the data dir.
func TestTaskManagerScratchFilesInDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dataDir := t.TempDir()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the processes' temporary files would go
	scratch := filepath.Join(dataDir, "taskmanager-0", "scratch")
	leftover := filepath.Join(scratch, "0123456789abcdef", "task-1")
	if err := os.MkdirAll(leftover, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(leftover, "goflink-state-1.db"), []byte("left by a killed taskmanager"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, cl := miniclustertest.StartT(t, minicluster.Options{DataDir: dataDir})
	if _, err := os.Stat(filepath.Dir(leftover)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("scratch files of a dead taskmanager are still there after a start: %v", err)
	}
	id := submit(t, ctx, cl, `name: bbolt-scratch
config:
  state.backend.type: bbolt
operators:
  - {name: numbers, type: sequence, from: 1, rate: 100}
  - {name: by, type: key-by, key: "value % 3"}
  - {name: counts, type: count}
  - {name: out, type: discard}
`)
	waitRunning(t, ctx, cl, id, 2)
	dbs, err := filepath.Glob(filepath.Join(scratch, "*", "task-*", "goflink-state-*.db"))
	if err != nil || len(dbs) != 1 {
		t.Errorf("bbolt files in the taskmanager's data dir: %q, %v; want one", dbs, err)
	}
	if inTmp, _ := filepath.Glob(filepath.Join(tmp, "goflink-state-*.db")); len(inTmp) != 0 {
		t.Errorf("bbolt files in the temporary directory: %q", inTmp)
	}
	if err := cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	watchEnd(t, ctx, cl, id)
	poll.Until(t, 10*time.Second, "the ended task's scratch dir to be removed", func() error {
		if left, _ := filepath.Glob(filepath.Join(scratch, "*", "task-*")); len(left) != 0 {
			return fmt.Errorf("left: %q", left)
		}
		return nil
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if left, err := os.ReadDir(scratch); err != nil || len(left) != 0 {
		t.Errorf("scratch dir after the taskmanager closed: %v, %v; want it empty", left, err)
	}
}

// TestConcurrentSubmissionsOfOneSinkDirectory: of submissions at once whose sinks name one
// directory, exactly one is accepted: each reserves its directories from the check until its
// record is in Raft.
func TestConcurrentSubmissionsOfOneSinkDirectory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	out := filepath.Join(t.TempDir(), "out")
	_, cl := miniclustertest.StartT(t, minicluster.Options{Slots: 8})
	const n = 8
	ids, errs := make(chan string, n), make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id, err := cl.Submit(ctx, &pb.SubmitJobRequest{Spec: fmt.Appendf(nil,
				"name: j%d\noperators:\n  - {name: numbers, type: sequence, from: 1, rate: 10}\n  - {name: out, type: file, path: %s}\n", i, out)})
			if err != nil {
				errs <- err
				return
			}
			ids <- id
		})
	}
	wg.Wait()
	close(ids)
	close(errs)
	if len(ids) != 1 {
		t.Errorf("%d of %d submissions naming one sink directory were accepted, want 1", len(ids), n)
	}
	for err := range errs {
		checkRefused(t, "Submit", err, codes.FailedPrecondition, "sink directory in use")
	}
	for id := range ids {
		if err := cl.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		watchEnd(t, ctx, cl, id)
	}
}

// A Kafka connector's ssl.*.location inside io.allowed-paths that is not a regular file — a
// FIFO here, which never ends like /dev/zero, or blocks the reader for ever — fails the job at
// its start on the TaskManager with the field and the file's kind named; the TaskManager neither hangs nor reads
// it, and it runs the next job.
func TestCredentialFileMustBeARegularFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	allowed := t.TempDir()
	fifo := filepath.Join(allowed, "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cl := confinedCluster(t, allowed, minicluster.Options{})
	spec := fmt.Sprintf("name: j\noperators:\n  - {name: in, type: kafka, brokers: [127.0.0.1:1], topic: t, properties: {security.protocol: SSL, ssl.ca.location: %s}}\n  - {name: out, type: discard}\n", fifo)
	last := watchEnd(t, ctx, cl, submit(t, ctx, cl, spec)) // the path is allowed: the TaskManager reads it
	if last.GetStatus() != pb.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("job ended %v, want FAILED", last.GetStatus())
	}
	for _, want := range []string{"ssl.ca.location", fifo, "is not a regular file (it is a FIFO)"} {
		if !strings.Contains(last.GetFailureCause(), want) {
			t.Errorf("the job's failure %q does not say %q", last.GetFailureCause(), want)
		}
	}
	id := submit(t, ctx, cl, "name: next\noperators:\n  - {name: numbers, type: sequence, from: 1, to: 100}\n  - {name: out, type: discard}\n")
	watchFinished(t, ctx, cl, id, 0)
}
