package rpc

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/grpc/encoding"
)

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func answerOf(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "member %d joined at %d; ", 1000+i, 1796208580000+i)
	}
	return b.Bytes()
}

// TestZipMemoCompressesARepeatedAnswerOnce: an answer seen once is
// compressed and not kept; seen again it is kept, and from then on served
// from the memo. Every output inflates to the answer.
func TestZipMemoCompressesARepeatedAnswerOnce(t *testing.T) {
	m := newZipMemo()
	gz := gzip.NewWriter(io.Discard)
	p := answerOf(100)
	var outs [][]byte
	for i := range 4 {
		var dst bytes.Buffer
		if err := m.compress(&dst, p, gz); err != nil {
			t.Fatal(err)
		}
		if got := gunzip(t, dst.Bytes()); !bytes.Equal(got, p) {
			t.Fatalf("call %d inflates to %d bytes, want the %d of the answer", i, len(got), len(p))
		}
		outs = append(outs, dst.Bytes())
		if want := min(i, 1); len(m.entries) != want {
			t.Fatalf("after %d calls the memo keeps %d answers, want %d", i+1, len(m.entries), want)
		}
	}
	e := m.entries[maphash.Bytes(m.seed, p)]
	if &outs[3][0] == &e.zipped[0] || !bytes.Equal(outs[2], e.zipped) || !bytes.Equal(outs[3], e.zipped) {
		t.Fatalf("the third and fourth answers are not the kept gzip (or share its memory)")
	}
	if m.bytes != len(e.raw)+len(e.zipped) {
		t.Fatalf("memo bytes %d, want %d", m.bytes, len(e.raw)+len(e.zipped))
	}
	// The caller's buffer is not kept: changing it does not change the memo.
	p[0] ^= 0xff
	if bytes.Equal(e.raw, p) {
		t.Fatal("the memo keeps the caller's buffer")
	}
}

// TestZipMemoComparesBeforeServing: an entry under the answer's hash whose
// answer differs (a collision) is never served.
func TestZipMemoComparesBeforeServing(t *testing.T) {
	m := newZipMemo()
	p := answerOf(50)
	other := answerOf(51)
	var zipped bytes.Buffer
	if err := gzipTo(&zipped, other, gzip.NewWriter(io.Discard)); err != nil {
		t.Fatal(err)
	}
	m.keep(maphash.Bytes(m.seed, p), zipEntry{raw: other, zipped: zipped.Bytes()})
	var dst bytes.Buffer
	if err := m.compress(&dst, p, gzip.NewWriter(io.Discard)); err != nil {
		t.Fatal(err)
	}
	if got := gunzip(t, dst.Bytes()); !bytes.Equal(got, p) {
		t.Fatalf("served another answer's gzip (%d bytes, want %d)", len(got), len(p))
	}
}

// TestZipMemoStaysBounded: many answers that repeat keep at most
// maxZipEntries and maxZipBytes; one over maxZipEntry is never kept.
func TestZipMemoStaysBounded(t *testing.T) {
	m := newZipMemo()
	gz := gzip.NewWriter(io.Discard)
	for i := range maxZipEntries + 200 {
		p := []byte(fmt.Sprintf("answer %d %s", i, answerOf(20)))
		for range 2 {
			if err := m.compress(io.Discard, p, gz); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(m.entries) > maxZipEntries || m.bytes > maxZipBytes {
		t.Fatalf("memo holds %d answers, %d bytes; bounds %d, %d", len(m.entries), m.bytes, maxZipEntries, maxZipBytes)
	}
	big := bytes.Repeat([]byte("x"), maxZipEntry+1)
	before := len(m.entries)
	for range 3 {
		var dst bytes.Buffer
		if err := m.compress(&dst, big, gz); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gunzip(t, dst.Bytes()), big) {
			t.Fatal("a large answer does not inflate to itself")
		}
	}
	if len(m.entries) != before {
		t.Fatalf("a %d-byte answer was kept", len(big))
	}
}

// TestGRPCGzipIsTheAPIs: grpc-go compresses and inflates with the API's
// gzip, and what it writes and reads is gzip.
func TestGRPCGzipIsTheAPIs(t *testing.T) {
	c := encoding.GetCompressor("gzip")
	if _, ok := c.(grpcGzip); !ok {
		t.Fatalf("grpc-go's gzip is %T", c)
	}
	p := answerOf(80)
	for range 3 { // the writers and readers come back from their pools
		var dst bytes.Buffer
		w, err := c.Compress(&dst)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(p[:10]); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(p[10:]); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gunzip(t, dst.Bytes()), p) {
			t.Fatal("grpc-go's gzip output does not inflate to the answer")
		}
		r, err := c.Decompress(bytes.NewReader(dst.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("grpc-go's gzip inflates to %d bytes (%v), want %d", len(got), err, len(p))
		}
		if err := r.(io.Closer).Close(); err != nil { // as grpc-go does
			t.Fatal(err)
		}
	}
	if _, err := c.Decompress(bytes.NewReader([]byte("not gzip"))); err == nil {
		t.Fatal("inflating bytes that are not gzip did not fail")
	}
}

// TestGRPCGzipReaderIsOnlySharedOnceClosed: grpc-go reads a message to its
// end and then closes the reader. Until it has, no other message gets that
// reader from the pool: it would reset what grpc-go's Close reads.
func TestGRPCGzipReaderIsOnlySharedOnceClosed(t *testing.T) {
	c := encoding.GetCompressor("gzip")
	var msg bytes.Buffer
	w, _ := c.Compress(&msg)
	if _, err := w.Write(answerOf(10)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	decompress := func() io.Reader {
		r, err := c.Decompress(bytes.NewReader(msg.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for range 20 { // the race detector's pool drops some of what it is given
		first := decompress()
		if _, err := io.ReadAll(first); err != nil {
			t.Fatal(err)
		}
		second := decompress()
		if first == second {
			t.Fatal("a reader read to its end went to another message before it was closed")
		}
		for _, r := range []io.Reader{second, first} {
			if err := r.(io.Closer).Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
