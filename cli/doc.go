// Package cli implements flinkctl, goflink's command-line client: run, list, status, cancel,
// checkpoints, checkpoint and cluster, with table or JSON output (the JSON shapes are a stable,
// documented contract).
package cli
