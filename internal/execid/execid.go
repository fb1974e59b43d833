// Package execid names execution attempts the same way in the JobManager and the TaskManager.
package execid

import (
	"fmt"

	pb "github.com/goflink/goflink/proto/goflink/v1"
)

// Key returns "job/vertex/subtask/attempt", unique per execution attempt of a cluster.
func Key(id *pb.ExecutionAttemptID) string {
	return fmt.Sprintf("%s/%d/%d/%d", id.GetJobId(), id.GetVertexId(), id.GetSubtask(), id.GetAttempt())
}
