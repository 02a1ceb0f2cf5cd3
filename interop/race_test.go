//go:build race

package interop

// raceEnabled is true when the test binary is built with -race: the courier
// binary under test is then built with -race too, and a data race it reports
// fails the test.
const raceEnabled = true
