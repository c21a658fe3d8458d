package sqlite

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite writes every frame of its write-ahead log with two system calls,
// the frame's 24-byte header and then its page, so a commit of a few hundred
// pages made as many hundred pwrite calls: in profiles of the 1,000-room
// gift run they took 30% of the single writer's CPU, and 8% of the service's
// in the 1,000-room joins. The writer connection opens its log through
// gatherVFS instead, SQLite's own unix VFS with one change: the log keeps
// the frames a transaction writes back to back in memory and writes them
// with one call, before anything else touches the file.
//
// What the change must not do is delay a byte past the moment somebody may
// need it. A reader learns of new frames from the log's index, which SQLite
// updates only after the commit's sync of the log when synchronous is FULL
// (pager.c: walSyncFlags; wal.c: sqlite3WalFrames syncs before
// walIndexAppend), and the sync writes the gathered frames first. So do a
// read of the log (the writer reading back a page it spilled), a truncate,
// a size, a file control and a close. A crash before the sync loses frames
// that were never part of a commit, as a crash between two pwrite calls
// did. A transaction that ends without a commit leaves its gathered frames
// behind; they are dropped when the connection gives up the log's write
// lock (gatherShmLock), since written later they could land on frames
// another process committed. With synchronous NORMAL a commit does not
// sync the log, so a reader could see frames still in memory: the writer
// gathers only under FULL (Open).

// gatherName is the name gatherVFS is registered under.
const gatherName = "unix-gather"

// maxGather bounds the bytes a log keeps in memory: past it, what it holds
// is written and gathering starts over.
const maxGather = 8 << 20

// writeChunk is the most gathered bytes handed to the unix VFS's xWrite at
// once: it cuts a write's length to 17 bits (os_unix.c, seekAndWriteFd) and
// reports the write that came out short as a full disk. 64 KiB is about 16
// frames of 4 KiB pages, one system call where there were 32.
const writeChunk = 64 << 10

var (
	gatherOnce sync.Once
	gatherErr  error

	unixPtr    uintptr                     // SQLite's unix VFS
	unixVFS    sqlite3.Tsqlite3_vfs        // a copy of it
	gatherVFS  sqlite3.Tsqlite3_vfs        // the same, but for xOpen and its name
	unixIO     sqlite3.Tsqlite3_io_methods // the methods of a log unix opened
	unixIOAddr uintptr                     // their address, to recognise them
	gatherIO   sqlite3.Tsqlite3_io_methods // the methods of a log gatherVFS opened

	unixDBIO     sqlite3.Tsqlite3_io_methods // the methods of a database file unix opened
	unixDBIOAddr uintptr
	gatherDBIO   sqlite3.Tsqlite3_io_methods // the same, but for xShmLock

	gatherMu    sync.Mutex
	gatherFiles = map[uintptr]*gatherFile{}   // by sqlite3_file address
	gatherConns = map[*libc.TLS]*gatherFile{} // each connection's log, by the connection's TLS
)

// gatherStats counts, for tests and figures, the log writes SQLite asked
// for, those that reached the file, and the transactions whose gathered
// frames were dropped (see gatherShmLock).
var gatherStats struct{ asked, written, dropped atomic.Int64 }

// gatherFile is one log opened through gatherVFS: frames buffered from
// offset off, n bytes of them, in C memory (buf, of size size) that the
// unix VFS's xWrite can take as it is.
type gatherFile struct {
	buf  uintptr
	size int
	n    int
	off  int64
}

// registerGather registers gatherVFS once per process.
func registerGather() error {
	gatherOnce.Do(func() { gatherErr = doRegisterGather() })
	return gatherErr
}

func doRegisterGather() error {
	tls := libc.NewTLS()
	defer tls.Close()
	name, err := libc.CString("unix")
	if err != nil {
		return fmt.Errorf("register %s: %w", gatherName, err)
	}
	defer libc.Xfree(tls, name)
	p := sqlite3.Xsqlite3_vfs_find(tls, name)
	if p == 0 {
		return fmt.Errorf("register %s: SQLite has no unix VFS", gatherName)
	}
	unixPtr = p
	copyFrom(tls, unsafe.Pointer(&unixVFS), p, unsafe.Sizeof(unixVFS))
	gatherVFS = unixVFS
	gatherVFS.FpNext = 0
	if gatherVFS.FzName, err = libc.CString(gatherName); err != nil {
		return fmt.Errorf("register %s: %w", gatherName, err)
	}
	*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&gatherVFS.FxOpen)) = gatherOpen
	if rc := sqlite3.Xsqlite3_vfs_register(tls, uintptr(unsafe.Pointer(&gatherVFS)), 0); rc != sqlite3.SQLITE_OK {
		return fmt.Errorf("register %s: SQLite error %d", gatherName, rc)
	}
	return nil
}

// copyFrom copies n bytes of C memory at src into dst, a package-level Go
// value: such a value never moves, as a goroutine's stack does.
func copyFrom(tls *libc.TLS, dst unsafe.Pointer, src uintptr, n uintptr) {
	libc.Xmemcpy(tls, uintptr(dst), src, types.Size_t(n))
}

// gatherOpen opens a file with the unix VFS, and a log with gatherIO.
func gatherOpen(tls *libc.TLS, _ uintptr, zName uintptr, pFile uintptr, flags int32, pOutFlags uintptr) int32 {
	open := *(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&unixVFS.FxOpen))
	rc := open(tls, unixPtr, zName, pFile, flags, pOutFlags)
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	methods := libc.AtomicLoadNUintptr(pFile, 0) // the file's first word: its methods
	switch {
	case methods == 0:
	case flags&sqlite3.SQLITE_OPEN_MAIN_DB != 0:
		if adopt(tls, methods, &unixDBIO, &unixDBIOAddr, &gatherDBIO, wrapDB) {
			libc.AtomicStoreNUintptr(pFile, uintptr(unsafe.Pointer(&gatherDBIO)), 0)
		}
	case flags&sqlite3.SQLITE_OPEN_WAL != 0:
		if !adopt(tls, methods, &unixIO, &unixIOAddr, &gatherIO, wrapLog) {
			return rc // not the methods gatherIO wraps: the log is written as unix writes it
		}
		f := &gatherFile{}
		gatherMu.Lock()
		gatherFiles[pFile] = f
		gatherConns[tls] = f
		gatherMu.Unlock()
		libc.AtomicStoreNUintptr(pFile, uintptr(unsafe.Pointer(&gatherIO)), 0)
	}
	return rc
}

// adopt builds wrapped from the methods unix gave the first file of a
// kind (orig, kept at origAddr), and reports whether methods are those.
func adopt(tls *libc.TLS, methods uintptr, orig *sqlite3.Tsqlite3_io_methods, origAddr *uintptr, wrapped *sqlite3.Tsqlite3_io_methods, wrap func(*sqlite3.Tsqlite3_io_methods)) bool {
	gatherMu.Lock()
	defer gatherMu.Unlock()
	if *origAddr == 0 {
		copyFrom(tls, unsafe.Pointer(orig), methods, unsafe.Sizeof(*orig))
		*origAddr = methods
		*wrapped = *orig
		wrap(wrapped)
	}
	return methods == *origAddr
}

// wrapLog makes m the methods of a log whose writes are gathered.
func wrapLog(m *sqlite3.Tsqlite3_io_methods) {
	*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&m.FxClose)) = gatherClose
	*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&m.FxRead)) = gatherRead
	*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&m.FxWrite)) = gatherWrite
	*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&m.FxTruncate)) = gatherTruncate
	*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&m.FxSync)) = gatherSync
	*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&m.FxFileSize)) = gatherFileSize
	*(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&m.FxFileControl)) = gatherFileControl
	// The log is never memory-mapped; a fetch would read the file.
	m.FxFetch, m.FxUnfetch = 0, 0
	if m.FiVersion > 2 {
		m.FiVersion = 2
	}
}

// wrapDB makes m the methods of a database file whose connection's log
// gathers its writes: they hear the log's write lock released.
func wrapDB(m *sqlite3.Tsqlite3_io_methods) {
	*(*func(*libc.TLS, uintptr, int32, int32, int32) int32)(unsafe.Pointer(&m.FxShmLock)) = gatherShmLock
}

// walWriteLock is the shared-memory lock slot of the log's writer (wal.c:
// WAL_WRITE_LOCK).
const walWriteLock = 0

// gatherShmLock drops what the connection's log still holds when the
// connection gives up the log's write lock. A commit wrote it all before
// its sync; what is left belongs to a transaction that ended without a
// commit (rolled back after it spilled pages, or a commit that failed), and
// written later, without the lock, it could overwrite frames another
// process committed meanwhile. SQLite writes those frames again if it
// needs them.
func gatherShmLock(tls *libc.TLS, pFile uintptr, ofst, n, flags int32) int32 {
	const unlock = sqlite3.SQLITE_SHM_UNLOCK | sqlite3.SQLITE_SHM_EXCLUSIVE
	if flags&unlock == unlock && ofst <= walWriteLock && walWriteLock < ofst+n {
		gatherMu.Lock()
		f := gatherConns[tls]
		gatherMu.Unlock()
		if f != nil && f.n > 0 {
			gatherStats.dropped.Add(1)
			f.n = 0
		}
	}
	lock := *(*func(*libc.TLS, uintptr, int32, int32, int32) int32)(unsafe.Pointer(&unixDBIO.FxShmLock))
	return lock(tls, pFile, ofst, n, flags)
}

func fileOf(pFile uintptr) *gatherFile {
	gatherMu.Lock()
	defer gatherMu.Unlock()
	return gatherFiles[pFile]
}

// flush writes what f gathered with the unix VFS's xWrite. What a failed
// write held is dropped: SQLite fails the transaction, and a later one
// writes its frames again.
func (f *gatherFile) flush(tls *libc.TLS, pFile uintptr) int32 {
	if f.n == 0 {
		return sqlite3.SQLITE_OK
	}
	write := *(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&unixIO.FxWrite))
	n := f.n
	f.n = 0
	for at := 0; at < n; at += writeChunk {
		gatherStats.written.Add(1)
		if rc := write(tls, pFile, f.buf+uintptr(at), int32(min(writeChunk, n-at)), f.off+int64(at)); rc != sqlite3.SQLITE_OK {
			return rc
		}
	}
	return sqlite3.SQLITE_OK
}

func gatherWrite(tls *libc.TLS, pFile uintptr, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	f := fileOf(pFile)
	gatherStats.asked.Add(1)
	n := int(iAmt)
	if f.n > 0 && (iOfst != f.off+int64(f.n) || f.n+n > maxGather) {
		if rc := f.flush(tls, pFile); rc != sqlite3.SQLITE_OK {
			return rc
		}
	}
	if n > writeChunk {
		// Not a frame: SQLite's own writes are never this long.
		write := *(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&unixIO.FxWrite))
		gatherStats.written.Add(1)
		return write(tls, pFile, zBuf, iAmt, iOfst)
	}
	if f.n+n > f.size {
		size := max(2*f.size, f.n+n, 64<<10)
		buf := libc.Xrealloc(tls, f.buf, types.Size_t(size))
		if buf == 0 {
			return sqlite3.SQLITE_IOERR_NOMEM
		}
		f.buf, f.size = buf, size
	}
	if f.n == 0 {
		f.off = iOfst
	}
	libc.Xmemcpy(tls, f.buf+uintptr(f.n), zBuf, types.Size_t(n))
	f.n += n
	return sqlite3.SQLITE_OK
}

func gatherSync(tls *libc.TLS, pFile uintptr, flags int32) int32 {
	if rc := fileOf(pFile).flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	sync := *(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&unixIO.FxSync))
	return sync(tls, pFile, flags)
}

func gatherRead(tls *libc.TLS, pFile uintptr, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	if rc := fileOf(pFile).flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	read := *(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&unixIO.FxRead))
	return read(tls, pFile, zBuf, iAmt, iOfst)
}

func gatherTruncate(tls *libc.TLS, pFile uintptr, size int64) int32 {
	if rc := fileOf(pFile).flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	truncate := *(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&unixIO.FxTruncate))
	return truncate(tls, pFile, size)
}

func gatherFileSize(tls *libc.TLS, pFile uintptr, pSize uintptr) int32 {
	if rc := fileOf(pFile).flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	fileSize := *(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&unixIO.FxFileSize))
	return fileSize(tls, pFile, pSize)
}

func gatherFileControl(tls *libc.TLS, pFile uintptr, op int32, pArg uintptr) int32 {
	if rc := fileOf(pFile).flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	control := *(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&unixIO.FxFileControl))
	return control(tls, pFile, op, pArg)
}

func gatherClose(tls *libc.TLS, pFile uintptr) int32 {
	gatherMu.Lock()
	f := gatherFiles[pFile]
	delete(gatherFiles, pFile)
	for tls, g := range gatherConns {
		if g == f {
			delete(gatherConns, tls)
		}
	}
	gatherMu.Unlock()
	rc := f.flush(tls, pFile)
	libc.Xfree(tls, f.buf)
	closeFile := *(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&unixIO.FxClose))
	if rc2 := closeFile(tls, pFile); rc == sqlite3.SQLITE_OK {
		rc = rc2
	}
	return rc
}
