//go:build !unix

package inbox_test

import "time"

// processCPU returns 0: the platform's process CPU time is not read here,
// and the benchmark leaves out the figures that need it.
func processCPU() time.Duration { return 0 }
