// Package e2e is the end-to-end test of the docker compose cluster (deploy/docker-compose.yml):
// three JobManagers and three TaskManagers in containers that share no volume, an S3 server
// (versitygw) holding the checkpoints and the sink output, the exactly-once sequence job, and
// the faults operators cause (docker kill of a TaskManager and of the leader JobManager, a
// JobManager cut from the network and reconnected, a TaskManager paused past the heartbeat
// timeout, the S3 server killed and started again), then a check of the committed output
// read from the bucket.
//
// The test needs a Docker engine with Compose and the image from `make images`, so it is
// behind the build tag e2e and `go test ./...` does not run it. Run it with `make e2e`, which
// builds the images and bin/flinkctl, passes the S3 secret key in GOFLINK_S3_SECRET_KEY, passes the Compose command it detected in COMPOSE, and
// removes the compose project (containers, network, volumes) even when the run is interrupted.
package e2e
