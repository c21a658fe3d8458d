// Command room-service runs the room engine and serves its API.
//
// With no configuration it listens on 127.0.0.1:8080 and keeps its data in
// SQLite under ./data. See README.md for every setting; the program itself
// is internal/daemon.
package main

import (
	"os"

	"hyapp/room-service/internal/daemon"
)

func main() {
	os.Exit(daemon.Execute(os.Args[1:], os.Getenv))
}
