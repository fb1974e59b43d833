package coordinator

import (
	"fmt"
	"os"
	"path/filepath"
)

// defaultCheckpointDirName is the directory in the JobManager's data dir that holds the
// checkpoints of jobs when execution.checkpointing.dir is set nowhere.
const defaultCheckpointDirName = "checkpoints"

// jobPaths is what the JobManager knows of the local paths jobs use.
type jobPaths struct {
	// defaultCheckpointDir is the absolute checkpoint directory of jobs that set none, and
	// whose cluster configuration sets none.
	defaultCheckpointDir string
}

// newJobPaths prepares the default checkpoint directory <dataDir>/checkpoints: a directory of
// this JobManager's own, created 0700, instead of one under the world-writable temporary
// directory, where another user could have created it first (and so read, replace or delete
// the checkpoints) and where the system's cleanup deletes old files. It is made absolute:
// TaskManagers on the same machine find it whatever their working directory; on several
// machines execution.checkpointing.dir must name a shared directory anyway.
func newJobPaths(dataDir string) (jobPaths, error) {
	abs, err := filepath.Abs(filepath.Join(dataDir, defaultCheckpointDirName))
	if err != nil {
		return jobPaths{}, fmt.Errorf("jobmanager: default checkpoint directory: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return jobPaths{}, fmt.Errorf("jobmanager: default checkpoint directory: %w", err)
	}
	return jobPaths{defaultCheckpointDir: abs}, nil
}
