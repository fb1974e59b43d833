// Package kafka is the Kafka connector's runtime: the "kafka" operator type (described in
// kafkaspec) as a source of Kafka partitions, with offsets in checkpointed state, and as a
// sink with exactly-once transactions committed on checkpoint completion. It builds on the
// franz-go client; TaskManagers register Type, JobManagers kafkaspec.Type.
//
// The sink's mutexes are taken in franz-go's callbacks; they and their order are listed in
// LOCKORDER.md at the repository root.
package kafka

import (
	"github.com/goflink/goflink/connector/kafka/kafkaspec"
	"github.com/goflink/goflink/operator"
	"github.com/goflink/goflink/record"
)

// Type is the "kafka" operator type with its runtime.
var Type = func() operator.Type {
	t := operator.Runs(kafkaspec.Type, func(c kafkaspec.SourceConfig, _, _ *record.Schema) (any, error) {
		return newKafkaSource(&c)
	})
	sink := operator.Runs(*kafkaspec.Type.WithInputs, func(c kafkaspec.SinkConfig, in, _ *record.Schema) (any, error) {
		return newKafkaSink(&c, in)
	})
	t.WithInputs = &sink
	return t
}()
