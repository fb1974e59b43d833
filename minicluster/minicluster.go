// Package minicluster runs a whole goflink cluster in one process — one JobManager (or a Raft
// group of several) with real Raft and N TaskManagers — over real gRPC on loopback ports.
// flinkctl run --local uses it, and so can a build of goflink with its own operator types
// (examples/custom-operator); package miniclustertest starts one for a test.
package minicluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goflink/goflink/client"
	"github.com/goflink/goflink/config"
	"github.com/goflink/goflink/coordinator"
	"github.com/goflink/goflink/internal/poll"
	"github.com/goflink/goflink/internal/security"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/worker"
)

// Options configure a mini cluster.
type Options struct {
	// JobManagers is the size of the JobManagers' Raft group (default 1).
	JobManagers  int
	TaskManagers int // default 1
	Slots        int // per TaskManager, default 1
	// Settings is the cluster configuration (shared by the JobManager and TaskManagers).
	Settings *config.Config
	// TaskManagerSettings, when set, are merged over Settings for the TaskManagers alone: a
	// TaskManager configured unlike its JobManager (a narrower io.allowed-paths).
	TaskManagerSettings *config.Config
	// DataDir holds the JobManagers' Raft files (in jobmanager/, or jm-<i>/ for a group) and
	// the TaskManagers' local files (taskmanager-<i>/, i counting from 0 in start order); a
	// temporary directory when empty.
	DataDir string
	Stdout  io.Writer // print sinks (default os.Stdout)
	Logger  *slog.Logger
	// RaftLogger receives hashicorp/raft's own records; they are discarded when it is nil.
	RaftLogger *slog.Logger
	Operators  []operator.Type // custom operator types
	// Metrics has every process serve its Prometheus metrics on a loopback port of its own
	// (a JobManager on its first start only): see MetricsAddr.
	Metrics bool
	// REST has every JobManager serve its dashboard on a loopback port of its own (on its
	// first start only): see coordinator.JobManager.RESTAddr.
	REST bool
}

// Cluster is a running mini cluster.
type Cluster struct {
	// JMs are the JobManagers; JM is the first (the only one by default). A stopped
	// JobManager's entry is nil.
	JMs     []*coordinator.JobManager
	JM      *coordinator.JobManager
	jmCfgs  []coordinator.Config
	TMs     []*worker.TaskManager
	tmpDir  string
	opts    Options
	dataDir string
}

// Start starts the JobManager, then the TaskManagers.
func Start(opts Options) (*Cluster, error) {
	opts.TaskManagers, opts.Slots = max(opts.TaskManagers, 1), max(opts.Slots, 1)
	opts.Settings = cmp.Or(opts.Settings, config.New())
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.NewTextHandler(io.Discard, nil)))
	opts.RaftLogger = cmp.Or(opts.RaftLogger, slog.New(slog.DiscardHandler))
	c := &Cluster{opts: opts, dataDir: opts.DataDir}
	if c.dataDir == "" {
		dir, err := os.MkdirTemp("", "goflink-minicluster-")
		if err != nil {
			return nil, err
		}
		c.tmpDir, c.dataDir = dir, dir
	}
	if err := c.startJobManagers(); err != nil {
		c.Close()
		return nil, err
	}
	for range opts.TaskManagers {
		if _, err := c.AddTaskManager(); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// startJobManagers binds every JobManager's RPC and Raft sockets on loopback, so that the
// group's addresses are known and taken before any member starts, then starts them: one
// with the historical node ID "jm-local", or a Raft group jm-1..jm-N. A member restarted
// after StopJobManager binds the same addresses again.
func (c *Cluster) startJobManagers() error {
	n := max(c.opts.JobManagers, 1)
	var peers []coordinator.Peer
	for i := range n {
		id, dir := "jm-local", "jobmanager"
		if n > 1 {
			id = fmt.Sprintf("jm-%d", i+1)
			dir = id
		}
		// Appended before binding: Close closes what is bound.
		c.jmCfgs = append(c.jmCfgs, coordinator.Config{NodeID: id, DataDir: filepath.Join(c.dataDir, dir)})
		cfg := &c.jmCfgs[i]
		var err error
		if cfg.RPCListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		if cfg.RaftListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		if c.opts.Metrics {
			if cfg.MetricsListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return err
			}
		}
		if c.opts.REST {
			if cfg.RESTListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return err
			}
		}
		cfg.RPCAddr, cfg.RaftAddr = cfg.RPCListener.Addr().String(), cfg.RaftListener.Addr().String()
		if n > 1 {
			peers = append(peers, coordinator.Peer{ID: id, RaftAddr: cfg.RaftAddr})
		}
	}
	for i := range c.jmCfgs {
		c.jmCfgs[i].Peers = peers
	}
	c.JMs = make([]*coordinator.JobManager, n)
	for i := range n {
		if err := c.StartJobManager(i); err != nil {
			return err
		}
	}
	return nil
}

// StartJobManager starts JobManager i (again, after StopJobManager) on its data directory.
func (c *Cluster) StartJobManager(i int) error {
	if c.JMs[i] != nil {
		return fmt.Errorf("jobmanager %d is running", i)
	}
	cfg := c.jmCfgs[i]
	c.jmCfgs[i].RPCListener, c.jmCfgs[i].RaftListener, c.jmCfgs[i].MetricsListener, c.jmCfgs[i].RESTListener = nil, nil, nil, nil // Start owns them; a restart binds the addresses
	cfg.Settings, cfg.Operators, cfg.Logger, cfg.RaftLogger = c.opts.Settings, c.opts.Operators, c.opts.Logger, c.opts.RaftLogger
	jm, err := coordinator.Start(cfg)
	if err != nil {
		return err
	}
	c.JMs[i] = jm
	if i == 0 {
		c.JM = jm
	}
	return nil
}

// StopJobManager stops JobManager i as a crash would look to the others (its Raft state stays
// on disk).
func (c *Cluster) StopJobManager(i int) error {
	jm := c.JMs[i]
	if jm == nil {
		return nil
	}
	c.JMs[i] = nil
	if i == 0 {
		c.JM = nil
	}
	return jm.Close()
}

// Leader returns the index of the JobManager that leads, or -1.
func (c *Cluster) Leader() int {
	return slices.IndexFunc(c.JMs, func(jm *coordinator.JobManager) bool { return jm != nil && jm.IsLeader() })
}

// AddTaskManager starts one more TaskManager.
func (c *Cluster) AddTaskManager() (*worker.TaskManager, error) {
	settings := c.opts.Settings.Clone()
	if c.opts.TaskManagerSettings != nil {
		settings.Merge(c.opts.TaskManagerSettings)
	}
	if err := settings.Set(config.TaskSlots, fmt.Sprint(c.opts.Slots)); err != nil {
		return nil, err
	}
	var metricsLis net.Listener
	if c.opts.Metrics {
		var err error
		if metricsLis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	tm, err := worker.Start(worker.Config{
		Addr: "127.0.0.1:0", JobManagers: c.jmAddrs(), Settings: settings, MetricsListener: metricsLis,
		DataDir:   filepath.Join(c.dataDir, fmt.Sprintf("taskmanager-%d", len(c.TMs))),
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
//
// With the cluster's security settings it connects as a member of the cluster: the internal
// certificate, and the token.
func (c *Cluster) Client() (*client.Client, error) {
	sec, err := security.FromSettings(c.opts.Settings, c.opts.Logger)
	if err != nil {
		return nil, err
	}
	return client.NewWithOptions(sec.MemberDialOptions(), c.Addr())
}

// Addr returns the JobManagers' RPC addresses, comma-separated (one for a single JobManager).
func (c *Cluster) Addr() string { return strings.Join(c.jmAddrs(), ",") }

// jmAddrs returns the JobManagers' RPC addresses, whether they run or not.
func (c *Cluster) jmAddrs() []string {
	var out []string
	for _, cfg := range c.jmCfgs {
		out = append(out, cfg.RPCAddr)
	}
	return out
}

// WaitReady waits until the JobManager leads and every TaskManager is registered.
func (c *Cluster) WaitReady(ctx context.Context) error {
	cl, err := c.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	err = poll.Wait(ctx, func() error {
		info, err := cl.Cluster(ctx)
		if err != nil {
			return err
		}
		if n := len(info.GetTaskmanagers()); n != len(c.TMs) {
			return fmt.Errorf("%d of %d taskmanagers registered", n, len(c.TMs))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mini cluster not ready: %w", err)
	}
	return nil
}

// Close stops the JobManager, then the TaskManagers, and removes temporary files. Stopping the
// JobManager first leaves running jobs as they are in Raft (a cluster restarted on the same
// DataDir recovers them), rather than failing them because their TaskManagers went away.
func (c *Cluster) Close() error {
	var errs []error
	for i := range c.JMs {
		errs = append(errs, c.StopJobManager(i))
	}
	for _, tm := range c.TMs {
		errs = append(errs, tm.Close())
	}
	for _, cfg := range c.jmCfgs { // bound, but a JobManager did not start to take them
		for _, l := range []net.Listener{cfg.RPCListener, cfg.RaftListener, cfg.MetricsListener, cfg.RESTListener} {
			if l != nil {
				l.Close()
			}
		}
	}
	if c.tmpDir != "" {
		os.RemoveAll(c.tmpDir)
	}
	return errors.Join(errs...)
}
