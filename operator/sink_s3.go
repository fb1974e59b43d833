package operator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/goflink/goflink/storage"
)

// s3SinkTimeout bounds each S3 request of the file sink (a part's upload is the longest).
const s3SinkTimeout = 5 * time.Minute

// maxUploadParts is the most parts an S3 multipart upload can have.
const maxUploadParts = 10000

// s3Parts keeps part files as S3 multipart uploads under an s3://bucket/prefix location (see
// fileSink): a transaction's upload is invisible until completed, so there is nothing to
// rename. The location is opened with the TaskManager's S3 settings (Context.S3) and is not
// claimed: S3 has no exclusive create (see fileSink).
type s3Parts struct {
	uri      string
	timeout  time.Duration // of each request
	partSize int           // of every part but the last, at least storage.MinPartSize
	s3       *storage.S3
}

func (p *s3Parts) String() string { return p.uri }

func (p *s3Parts) object(name string) string { return name + committedSuffix }

func (p *s3Parts) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), p.timeout)
}

func (p *s3Parts) open(ctx *Context) error {
	fsys, err := storage.Open(p.uri, ctx.S3)
	if err != nil {
		return err
	}
	s3, ok := fsys.(*storage.S3)
	if !ok {
		return fmt.Errorf("%s is not an S3 location", p.uri)
	}
	p.s3 = s3
	return nil
}

func (p *s3Parts) close() error { return nil }

// inUse: the object exists, or an upload of it is in progress.
func (p *s3Parts) inUse(name string) (bool, error) {
	ctx, cancel := p.ctx()
	defer cancel()
	_, err := p.s3.Stat(ctx, p.object(name))
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	ups, err := p.s3.ListUploads(ctx, p.object(name))
	if err != nil {
		return false, err
	}
	for _, u := range ups {
		if u.Name == p.object(name) {
			return true, nil
		}
	}
	return false, nil
}

// create starts the transaction's multipart upload.
func (p *s3Parts) create(t *fileTxn) error {
	ctx, cancel := p.ctx()
	defer cancel()
	id, err := p.s3.NewUpload(ctx, p.object(t.Name))
	if err != nil {
		return err
	}
	t.Upload = id
	return nil
}

// write buffers p and uploads every full part.
func (p *s3Parts) write(t *fileTxn, b []byte) error {
	if t.upErr != nil {
		return t.upErr
	}
	t.Size += int64(len(b))
	for len(b) > 0 {
		if t.pending == nil {
			t.pending = make([]byte, 0, p.partSize)
		}
		n := min(len(b), p.partSize-len(t.pending))
		t.pending = append(t.pending, b[:n]...)
		b = b[n:]
		if len(t.pending) == p.partSize {
			if err := p.upload(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// partUpload is the outcome of a part's background upload, with its buffer to reuse.
type partUpload struct {
	part storage.Part
	buf  []byte
	err  error
}

// upload starts uploading the buffered bytes as the next part, in the background once the
// previous part's upload finished: one part uploads while the task fills the next, so a
// transaction holds at most two parts' bytes. The part joins t.Parts when it is waited for
// (await); a failed upload fails the transaction's later writes and its pre-commit.
func (p *s3Parts) upload(t *fileTxn) error {
	if err := p.await(t); err != nil {
		return err
	}
	if len(t.Parts) >= maxUploadParts {
		return fmt.Errorf("transaction %s: more than %d parts of %d bytes: a checkpoint interval this long makes too large a part file", t.Name, maxUploadParts, p.partSize)
	}
	data, number, obj, id := t.pending, len(t.Parts)+1, p.object(t.Name), t.Upload
	t.pending, t.spare = t.spare[:0], nil
	done := make(chan partUpload, 1)
	t.inflight = done
	go func() {
		ctx, cancel := p.ctx()
		defer cancel()
		part, err := p.s3.UploadPart(ctx, obj, id, number, data)
		done <- partUpload{part: part, buf: data, err: err}
	}()
	return nil
}

// await waits for the part uploading in the background, if any, and adds it to t.Parts.
func (p *s3Parts) await(t *fileTxn) error {
	if t.inflight != nil {
		r := <-t.inflight
		t.inflight, t.spare = nil, r.buf
		if r.err != nil && t.upErr == nil {
			t.upErr = r.err
		}
		if r.err == nil {
			t.Parts = append(t.Parts, r.part)
		}
	}
	return t.upErr
}

// preCommit uploads the rest as the last part: the upload then holds every byte, and
// completing it needs only the state (the upload ID and the parts).
func (p *s3Parts) preCommit(t *fileTxn) error {
	if len(t.pending) > 0 || len(t.Parts) == 0 && t.inflight == nil {
		if err := p.upload(t); err != nil {
			return err
		}
	}
	if err := p.await(t); err != nil {
		return err
	}
	t.pending, t.spare = nil, nil
	return nil
}

// commit completes the upload. One that no longer exists was completed already if the
// object exists with the pre-committed size. A completion the server acknowledged is checked
// the same way: versitygw, killed while it completed an upload, keeps the upload claimed as
// in progress and acknowledges every later completion of it as done by that claim, although
// no object ever appears; without the check those rows would be lost without a word.
func (p *s3Parts) commit(t *fileTxn) error {
	ctx, cancel := p.ctx()
	defer cancel()
	obj := p.object(t.Name)
	err := p.s3.CompleteUpload(ctx, obj, t.Upload, t.Parts)
	if err != nil && !errors.Is(err, storage.ErrNoSuchUpload) {
		return err
	}
	info, serr := p.s3.Stat(ctx, obj)
	if err == nil && errors.Is(serr, fs.ErrNotExist) {
		return fmt.Errorf("data loss: the S3 server acknowledged completing the upload %s of %s/%s, but the object does not exist "+
			"(versitygw does so for an upload whose completion it was killed in)", t.Upload, p.uri, obj)
	}
	switch {
	case serr == nil && info.Size == t.Size:
		return nil // already committed
	case serr == nil:
		return fmt.Errorf("data loss: the upload %s of %s/%s is gone and the object has %d bytes, %d were pre-committed", t.Upload, p.uri, obj, info.Size, t.Size)
	case errors.Is(serr, fs.ErrNotExist):
		return fmt.Errorf("data loss: committed object missing: neither the upload %s of %s/%s nor the object exists", t.Upload, p.uri, obj)
	default:
		return serr
	}
}

// abort aborts the upload (after its part in flight); one that no longer exists is fine.
func (p *s3Parts) abort(t *fileTxn) error {
	_ = p.await(t) // the upload goes; so does what failed in it
	t.pending, t.spare = nil, nil
	if t.Upload == "" {
		return nil // its start failed
	}
	return p.removeUpload(p.object(t.Name), t.Upload)
}

func (p *s3Parts) removeUpload(obj, id string) error {
	ctx, cancel := p.ctx()
	defer cancel()
	if err := p.s3.AbortUpload(ctx, obj, id); err != nil && !errors.Is(err, storage.ErrNoSuchUpload) {
		return err
	}
	return nil
}

// uncommitted lists the uploads in progress of part files directly under the location.
func (p *s3Parts) uncommitted() ([]uncommittedPart, error) {
	ctx, cancel := p.ctx()
	defer cancel()
	ups, err := p.s3.ListUploads(ctx, "part-")
	if err != nil {
		return nil, err
	}
	var out []uncommittedPart
	for _, u := range ups {
		name, ok := strings.CutSuffix(u.Name, committedSuffix)
		if !ok || !validPartName(name) {
			continue
		}
		out = append(out, uncommittedPart{txn: name, label: u.Name + " (upload " + u.ID + ")", id: u.ID})
	}
	return out, nil
}

func (p *s3Parts) remove(u uncommittedPart) error { return p.removeUpload(p.object(u.txn), u.id) }

// check validates the upload of a decoded transaction: one with a name has an upload; its
// parts are numbered from 1, have ETags, every one but the last at least S3's minimum part
// size; a pre-committed one has parts holding exactly its size.
func (p *s3Parts) check(t *fileTxn) error {
	if t.Size < 0 {
		return fmt.Errorf("negative size %d", t.Size)
	}
	if t.Name == "" {
		if t.Upload != "" || len(t.Parts) > 0 || t.Size != 0 {
			return errors.New("an upload or a size without a name")
		}
		return nil
	}
	if t.Upload == "" || len(t.Upload) > 1024 || strings.ContainsFunc(t.Upload, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("invalid upload ID %q", t.Upload)
	}
	if len(t.Parts) > maxUploadParts {
		return fmt.Errorf("%d parts, S3 takes at most %d", len(t.Parts), maxUploadParts)
	}
	var sum int64
	for i, part := range t.Parts {
		switch {
		case part.Number != i+1:
			return fmt.Errorf("part %d is numbered %d", i+1, part.Number)
		case part.ETag == "":
			return fmt.Errorf("part %d has no ETag", part.Number)
		case part.Size <= 0 || (i < len(t.Parts)-1 && part.Size < storage.MinPartSize):
			return fmt.Errorf("part %d has %d bytes", part.Number, part.Size)
		case part.Size > t.Size-sum: // sum <= t.Size: no overflow
			return fmt.Errorf("parts hold more than the transaction's %d bytes", t.Size)
		}
		sum += part.Size
	}
	if t.Prepared && (sum != t.Size || len(t.Parts) == 0) {
		return fmt.Errorf("parts hold %d bytes, the transaction %d", sum, t.Size)
	}
	return nil
}
