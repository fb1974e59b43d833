// Package e2e is the end-to-end test of the docker compose cluster (deploy/docker-compose.yml):
// three JobManagers and three TaskManagers in containers, the exactly-once sequence job, and
// the faults operators cause (docker kill of a TaskManager and of the leader JobManager, a
// JobManager cut from the network and reconnected, a TaskManager paused past the heartbeat
// timeout), then a check of the committed output in the shared volume.
//
// The test needs a Docker engine with Compose and the image from `make images`, so it is
// behind the build tag e2e and `go test ./...` does not run it. Run it with `make e2e`, which
// builds the image and bin/flinkctl, passes the Compose command it detected in COMPOSE, and
// removes the compose project (containers, network, volume) even when the run is interrupted.
package e2e
