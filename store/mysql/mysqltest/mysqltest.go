// Package mysqltest gives tests a fresh MySQL/MariaDB database and a TCP
// proxy that can cut the connection to it.
//
// The server is ROOM_TEST_MYSQL_DSN (a go-sql-driver DSN; its database name
// is ignored), by default root@tcp(127.0.0.1:3306)/ as .ci/run starts it.
// When the server cannot be reached, tests skip, unless the CI environment
// variable is set: then a missing server fails them.
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// DefaultServer is the server DSN used when ROOM_TEST_MYSQL_DSN is unset.
const DefaultServer = "root@tcp(127.0.0.1:3306)/"

// DSN creates a database of its own for the test (roomtest_<random>),
// drops it in t.Cleanup, and returns a DSN naming it. It skips the test
// when the server is unreachable, or fails it when CI is set.
func DSN(t testing.TB) string {
	t.Helper()
	cfg := server(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "roomtest_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin(ctx, cfg, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("mysqltest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin(ctx, cfg, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("mysqltest: drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// server returns the server's config after checking it is reachable.
func server(t testing.TB) *mysql.Config {
	t.Helper()
	dsn := os.Getenv("ROOM_TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = DefaultServer
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("mysqltest: ROOM_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Second
	}
	conn, err := net.DialTimeout(cfg.Net, cfg.Addr, cfg.Timeout)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mysqltest: MySQL at %s is unreachable and CI is set: %v", cfg.Addr, err)
		}
		t.Skipf("mysqltest: MySQL at %s is unreachable: %v", cfg.Addr, err)
	}
	_ = conn.Close()
	return cfg
}

// admin runs one statement on the server with no database selected.
func admin(ctx context.Context, cfg *mysql.Config, stmt string) error {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// Proxy forwards TCP connections from a local port to a target address,
// and can cut them all, as a network partition or a server crash would, and
// then accept again on the same port.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener          // nil while cut
	conns map[net.Conn]struct{} // both ends of every forwarded connection
	wg    sync.WaitGroup
}

// NewProxy listens on 127.0.0.1 on a free port and forwards every
// connection to target. It is cut in t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("mysqltest: proxy listen: %v", err)
	}
	p := &Proxy{t: t, target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's address, host:port; it stays the same across Cut and Restore.
func (p *Proxy) Addr() string { return p.addr }

// Cut closes the listener and every forwarded connection, and waits for the
// proxy's goroutines to end. New connections are refused until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Restore listens again on the same address. It fails the test if the port
// was taken meanwhile.
func (p *Proxy) Restore() {
	p.t.Helper()
	p.mu.Lock()
	up := p.ln != nil
	p.mu.Unlock()
	if up {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("mysqltest: proxy listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return // closed by Cut
			}
			p.forward(client)
		}
	})
}

// forward dials the target for client and copies both ways until either
// side closes or Cut closes both.
func (p *Proxy) forward(client net.Conn) {
	upstream, err := net.DialTimeout("tcp", p.target, 3*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut while dialling
		p.mu.Unlock()
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	p.conns[client], p.conns[upstream] = struct{}{}, struct{}{}
	p.mu.Unlock()

	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = client.Close()
			_ = upstream.Close()
			p.mu.Lock()
			delete(p.conns, client)
			delete(p.conns, upstream)
			p.mu.Unlock()
		})
	}
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends when either side closes
		closeBoth()
	}
	p.wg.Go(func() { pipe(upstream, client) })
	p.wg.Go(func() { pipe(client, upstream) })
}
