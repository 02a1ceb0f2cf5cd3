//go:build !race

package interop

// raceEnabled is true when the test binary is built with -race.
const raceEnabled = false
