package app_test

import (
	"testing"

	"github.com/opsbot/opsbot/internal/testrun"
)

// TestMain runs this package's tests through testrun (the shared
// PostgreSQL cluster is stopped at exit).
func TestMain(m *testing.M) { testrun.Main(m) }
