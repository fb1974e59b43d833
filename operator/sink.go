package operator

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/goflink/goflink/record"
)

// printSink writes one JSON object per record to the TaskManager's stdout, prefixed with
// "<subtask>> " when the sink runs in parallel (as Flink's print sink does). Lines are written
// in whole chunks so parallel sinks never interleave within a line. It is at-least-once at
// best: a restarted job prints again.
type printSink struct {
	base
	schema *record.Schema
	prefix []byte
	buf    []byte
}

func (p *printSink) Open(ctx *Context, out Output) error {
	if ctx.Parallelism > 1 {
		p.prefix = strconv.AppendInt(nil, int64(ctx.Subtask+1), 10)
		p.prefix = append(p.prefix, "> "...)
	}
	return p.base.Open(ctx, out)
}

func (p *printSink) Process(row record.Row) error {
	p.buf = append(p.buf, p.prefix...)
	p.buf = record.AppendJSON(p.buf, p.schema, row)
	p.buf = append(p.buf, '\n')
	if len(p.buf) >= 32<<10 {
		return p.Flush()
	}
	return nil
}

func (p *printSink) Flush() error {
	if len(p.buf) == 0 {
		return nil
	}
	_, err := p.ctx.Stdout.Write(p.buf)
	p.buf = p.buf[:0]
	return err
}

func (p *printSink) EndInput() error { return p.Flush() }
func (p *printSink) Close() error    { return p.Flush() }

// fileSink writes JSON lines to <dir>/part-<subtask>-<attempt>.jsonl. This is a plain
// (not yet two-phase-commit) write: a failed job leaves what it wrote.
type fileSink struct {
	base
	schema *record.Schema
	dir    string
	f      *os.File
	w      *bufio.Writer
	buf    []byte
}

func (s *fileSink) Open(ctx *Context, out Output) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	name := filepath.Join(s.dir, fmt.Sprintf("part-%d-%d.jsonl", ctx.Subtask, ctx.Attempt))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	s.f, s.w = f, bufio.NewWriterSize(f, 64<<10)
	return s.base.Open(ctx, out)
}

func (s *fileSink) Process(row record.Row) error {
	s.buf = record.AppendJSON(s.buf[:0], s.schema, row)
	s.buf = append(s.buf, '\n')
	_, err := s.w.Write(s.buf)
	return err
}

func (s *fileSink) Flush() error { return s.w.Flush() }

// EndInput flushes and fsyncs, so a FINISHED job's output is durable.
func (s *fileSink) EndInput() error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	return nil
}

func (s *fileSink) Close() error {
	if s.f == nil {
		return nil
	}
	ferr := s.w.Flush()
	cerr := s.f.Close()
	s.f = nil
	if ferr != nil {
		return fmt.Errorf("file sink: %w", ferr)
	}
	return cerr
}

// discardSink drops every record.
type discardSink struct{ base }

func (*discardSink) Process(record.Row) error { return nil }
