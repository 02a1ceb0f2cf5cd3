package delivery

// Unordered turns the order per object off in c: the benchmark of what
// order costs runs the same fan-outs with and without it.
func Unordered(c *Config) { c.unordered = true }
