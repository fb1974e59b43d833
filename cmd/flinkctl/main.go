// Command flinkctl submits and inspects goflink jobs.
package main

import (
	"os"

	"github.com/goflink/goflink/cli"
)

func main() { os.Exit(cli.Main()) }
