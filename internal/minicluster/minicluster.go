// Package minicluster runs a whole goflink cluster in one process — one JobManager with real
// Raft and N TaskManagers — over real gRPC on loopback ports. flinkctl run --local and the
// integration tests use it.
package minicluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/worker"
)

// Options configure a mini cluster.
type Options struct {
	TaskManagers int // default 1
	Slots        int // per TaskManager, default 1
	// Settings is the cluster configuration (shared by the JobManager and TaskManagers).
	Settings *config.Config
	// DataDir holds the JobManager's Raft files; a temporary directory when empty.
	DataDir   string
	Stdout    io.Writer // print sinks (default os.Stdout)
	Logger    *slog.Logger
	RaftLog   io.Writer
	Operators *operator.Registry
}

// Cluster is a running mini cluster.
type Cluster struct {
	JM      *coordinator.JobManager
	TMs     []*worker.TaskManager
	tmpDir  string
	opts    Options
	dataDir string
}

// Start starts the JobManager, then the TaskManagers.
func Start(opts Options) (*Cluster, error) {
	if opts.TaskManagers <= 0 {
		opts.TaskManagers = 1
	}
	if opts.Slots <= 0 {
		opts.Slots = 1
	}
	if opts.Settings == nil {
		opts.Settings = config.New()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.RaftLog == nil {
		opts.RaftLog = io.Discard
	}
	c := &Cluster{opts: opts, dataDir: opts.DataDir}
	if c.dataDir == "" {
		dir, err := os.MkdirTemp("", "goflink-minicluster-")
		if err != nil {
			return nil, err
		}
		c.tmpDir, c.dataDir = dir, dir
	}
	jm, err := coordinator.Start(coordinator.Config{
		NodeID: "jm-local", RPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", DataDir: filepath.Join(c.dataDir, "jobmanager"),
		Settings: opts.Settings, Operators: opts.Operators, Logger: opts.Logger, RaftLog: opts.RaftLog,
	})
	if err != nil {
		c.cleanup()
		return nil, err
	}
	c.JM = jm
	for range opts.TaskManagers {
		if _, err := c.AddTaskManager(); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// AddTaskManager starts one more TaskManager.
func (c *Cluster) AddTaskManager() (*worker.TaskManager, error) {
	settings := c.opts.Settings.Clone()
	if err := settings.Set(config.TaskSlots, fmt.Sprint(c.opts.Slots)); err != nil {
		return nil, err
	}
	tm, err := worker.Start(worker.Config{
		Addr: "127.0.0.1:0", JobManagers: []string{c.JM.Addr()}, Settings: settings,
		Operators: c.opts.Operators, Stdout: c.opts.Stdout, Logger: c.opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	c.TMs = append(c.TMs, tm)
	return tm, nil
}

// StartReady starts a cluster and waits until it is ready (see WaitReady).
func StartReady(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := Start(opts)
	if err != nil {
		return nil, err
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Client returns a client of the cluster; close it after use.
func (c *Cluster) Client() (*client.Client, error) { return client.New(c.Addr()) }

// Addr returns the JobManager's RPC address.
func (c *Cluster) Addr() string { return c.JM.Addr() }

// WaitReady waits until the JobManager leads and every TaskManager is registered.
func (c *Cluster) WaitReady(ctx context.Context) error {
	cl, err := client.New(c.Addr())
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		info, err := cl.Cluster(ctx)
		if err == nil && len(info.GetTaskmanagers()) == len(c.TMs) {
			return nil
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("mini cluster not ready: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

// Close stops the JobManager, then the TaskManagers, and removes temporary files. Stopping the
// JobManager first leaves running jobs as they are in Raft (a cluster restarted on the same
// DataDir recovers them), rather than failing them because their TaskManagers went away.
func (c *Cluster) Close() error {
	var errs []error
	if c.JM != nil {
		errs = append(errs, c.JM.Close())
	}
	for _, tm := range c.TMs {
		errs = append(errs, tm.Close())
	}
	c.cleanup()
	return errors.Join(errs...)
}

func (c *Cluster) cleanup() {
	if c.tmpDir != "" {
		os.RemoveAll(c.tmpDir)
	}
}
