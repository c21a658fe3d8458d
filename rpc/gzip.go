package rpc

import (
	"bytes"
	"hash/maphash"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // initialised first, so that the registration below replaces it
)

// The API's gzip, on both transports (connect's on listen, grpc-go's on
// grpc_listen), for answers of compressMinBytes and more:
//
//   - klauspost/compress, the same format as the standard library's at
//     nearly the same size, at a third to a sixth of its CPU for a
//     snapshot answer (16 µs against 58 µs for a room of 150 members,
//     61 µs against 347 µs for 1,000). grpc-go's own gzip is the standard
//     library's.
//   - a memo of the answers that repeat: the readers of one room version
//     (a room's listeners repairing what the IM group lost, all at once)
//     get the same bytes, which are compressed once. An answer is kept
//     when it is seen a second time, so answers that never repeat cost a
//     hash and no copy; a kept answer is found by its hash and compared
//     byte for byte.
//
// The memo is the process's: grpc-go's compressors are registered once,
// process-wide.

func init() { encoding.RegisterCompressor(grpcGzip{}) }

// Bounds of what the memo holds in memory.
const (
	maxZipEntries = 1024
	maxZipBytes   = 16 << 20 // of the entries' answers and their gzip
	maxZipEntry   = 1 << 20  // a larger answer is compressed for each call
	maxZipSeen    = 8192     // hashes of answers seen once
)

// zipMemo keeps the gzip of answers that repeat.
type zipMemo struct {
	seed    maphash.Seed
	mu      sync.Mutex
	entries map[uint64]zipEntry
	seen    map[uint64]struct{}
	bytes   int
}

type zipEntry struct{ raw, zipped []byte }

func newZipMemo() *zipMemo {
	return &zipMemo{seed: maphash.MakeSeed(), entries: make(map[uint64]zipEntry), seen: make(map[uint64]struct{})}
}

// answerZips is the process's memo.
var answerZips = newZipMemo()

// compress writes the gzip of p to dst, compressing with gz unless the
// memo has it.
func (m *zipMemo) compress(dst io.Writer, p []byte, gz *gzip.Writer) error {
	if len(p) > maxZipEntry {
		return gzipTo(dst, p, gz)
	}
	h := maphash.Bytes(m.seed, p)
	m.mu.Lock()
	e, kept := m.entries[h]
	_, again := m.seen[h]
	if !kept && !again {
		if len(m.seen) >= maxZipSeen {
			clear(m.seen)
		}
		m.seen[h] = struct{}{}
	}
	m.mu.Unlock()
	if kept && bytes.Equal(e.raw, p) {
		_, err := dst.Write(e.zipped)
		return err
	}
	if !again {
		return gzipTo(dst, p, gz)
	}
	var buf bytes.Buffer
	if err := gzipTo(&buf, p, gz); err != nil {
		return err
	}
	m.keep(h, zipEntry{raw: slices.Clone(p), zipped: buf.Bytes()})
	_, err := dst.Write(buf.Bytes())
	return err
}

// keep stores e under h, making room for it first.
func (m *zipMemo) keep(h uint64, e zipEntry) {
	size := len(e.raw) + len(e.zipped)
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, h)
	if old, ok := m.entries[h]; ok {
		m.bytes -= len(old.raw) + len(old.zipped)
		delete(m.entries, h)
	}
	for k, old := range m.entries { // a map's order is random: random eviction
		if len(m.entries) < maxZipEntries && m.bytes+size <= maxZipBytes {
			break
		}
		m.bytes -= len(old.raw) + len(old.zipped)
		delete(m.entries, k)
	}
	m.entries[h] = e
	m.bytes += size
}

func gzipTo(dst io.Writer, p []byte, gz *gzip.Writer) error {
	gz.Reset(dst)
	if _, err := gz.Write(p); err != nil {
		return err
	}
	return gz.Close()
}

// zipWriter takes one answer and, on Close, writes its gzip to the
// destination of its last Reset. It is connect's compressor.
type zipWriter struct {
	dst io.Writer
	buf []byte
	gz  *gzip.Writer
}

func newZipWriter() *zipWriter { return &zipWriter{gz: gzip.NewWriter(io.Discard)} }

func (w *zipWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *zipWriter) Reset(dst io.Writer) {
	w.dst = dst
	w.buf = w.buf[:0]
}

func (w *zipWriter) Close() error {
	err := answerZips.compress(w.dst, w.buf, w.gz)
	if cap(w.buf) > 64<<10 {
		w.buf = nil // a pooled writer does not keep a large answer's buffer
	}
	w.buf, w.dst = w.buf[:0], nil
	return err
}

// grpcGzip is the same gzip as grpc-go's compressor.
type grpcGzip struct{}

var (
	grpcZipWriters sync.Pool // *grpcZipWriter
	grpcZipReaders sync.Pool // *grpcZipReader
)

func (grpcGzip) Name() string { return "gzip" }

func (grpcGzip) Compress(w io.Writer) (io.WriteCloser, error) {
	z, _ := grpcZipWriters.Get().(*grpcZipWriter)
	if z == nil {
		z = &grpcZipWriter{zipWriter: newZipWriter()}
	}
	z.Reset(w)
	return z, nil
}

func (grpcGzip) Decompress(r io.Reader) (io.Reader, error) {
	z, _ := grpcZipReaders.Get().(*grpcZipReader)
	if z == nil {
		z = new(grpcZipReader)
	}
	if err := z.Reset(r); err != nil {
		grpcZipReaders.Put(z)
		return nil, err
	}
	return z, nil
}

// grpcZipWriter goes back to its pool when closed.
type grpcZipWriter struct{ *zipWriter }

func (z *grpcZipWriter) Close() error {
	err := z.zipWriter.Close()
	grpcZipWriters.Put(z)
	return err
}

// grpcZipReader goes back to its pool when closed: grpc-go closes it once
// it has read its message, or given up on it, and reads nothing after.
// Not at the message's end (io.EOF): grpc-go closes it after that, by
// which time another call may have taken it from the pool and be resetting
// it. grpc-go bounds what it reads from it (MaxRecvMsgSize).
type grpcZipReader struct{ gzip.Reader }

func (z *grpcZipReader) Close() error {
	err := z.Reader.Close()
	grpcZipReaders.Put(z)
	return err
}
