package slack

import (
	"testing"

	"github.com/opsbot/opsbot/internal/testrun"
)

// TestMain runs up to testrun.Parallel of this package's parallel tests at once: they wait on
// the lab's clock and on servers more than they compute.
func TestMain(m *testing.M) { testrun.Main(m) }
