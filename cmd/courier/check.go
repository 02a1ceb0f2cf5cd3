package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// checkListen refuses a listen address that cannot be bound whatever the
// machine: not host:port, a port that is not a number from 0 to 65535 (a
// service name is refused too: ":x" is a typo far more often than a name
// from /etc/services), or a host that is neither an IP address nor a name.
// It is checked with the other settings, so a typo ends the process with
// status 2 and one line before anything is opened.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || port == "" {
		return fmt.Errorf("port %q is not a number from 0 to 65535; want host:port", port)
	}
	if host != "" && !validHost(host) {
		return fmt.Errorf("host %q is neither an IP address nor a host name; want host:port", host)
	}
	return nil
}

// validHost reports whether h is an IP address (an IPv6 zone allowed) or a
// DNS name: labels of letters, digits, '-' and '_', separated by dots.
func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
			if !ok {
				return false
			}
		}
	}
	return true
}

// checkNATSHosts refuses a NATS URL whose servers name no usable host (NATS_URL
// '::::' parses as a URL, and the client would retry it for ever as an
// unreachable server). natsbus.ValidateURL has checked the scheme and port.
// The message never repeats the URL, which may carry a password.
func checkNATSHosts(s string) error {
	for i, part := range strings.Split(s, ",") {
		raw := strings.TrimSpace(part)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			return fmt.Errorf("server %d does not parse", i+1)
		}
		if !validHost(u.Hostname()) {
			return fmt.Errorf("server %d: %q is neither an IP address nor a host name", i+1, u.Hostname())
		}
	}
	return nil
}

// minTokenBits is the least estimated entropy of an admin token: past the
// admin API's throttle, a guess a second for a thousand years is 2^35.
const minTokenBits = 64

// checkTokenStrength refuses an admin token that is easy to guess although
// long enough: one with few distinct characters, one made of a repeated
// piece ("changeme" four times), or one whose estimated entropy is below
// minTokenBits. The estimate is deliberately rough and only ever low for
// tokens a person typed: each character that does not continue a run of
// three or more already seen counts log2 of the alphabet its character
// classes span (16 for hex, 26 or 52 for letters, 62 with digits, 94 with
// punctuation), and the estimate is at most the length times the Shannon
// entropy of the token's own character frequencies. openssl rand -hex 32
// gives about 250 bits; 32 random hex characters about 125.
func checkTokenStrength(tok string) error {
	distinct := map[rune]int{}
	n := 0
	for _, r := range tok {
		distinct[r]++
		n++
	}
	if len(distinct) < 8 {
		return fmt.Errorf("only %d distinct characters", len(distinct))
	}
	if p := period(tok); p < len(tok) {
		return fmt.Errorf("a piece of %d characters repeated", p)
	}
	bits := math.Min(novelChars(tok)*math.Log2(alphabet(tok)), shannon(distinct, n)*float64(n))
	if bits < minTokenBits {
		return fmt.Errorf("about %.0f bits of entropy, at least %d needed", bits, minTokenBits)
	}
	return nil
}

// period returns the length of the shortest piece that s repeats (a last
// repetition may be cut short); len(s) when s repeats nothing.
func period(s string) int {
	for p := 1; p <= len(s)/2; p++ {
		if s[p:] == s[:len(s)-p] {
			return p
		}
	}
	return len(s)
}

// novelChars counts the characters of s that neither continue a run of
// three or more characters that occurred earlier in s (LZ77's view of a
// string: a repeat costs little) nor continue a sequence like abc or 987.
func novelChars(s string) float64 {
	const minRun = 3
	novel := 0
	for i := 0; i < len(s); {
		best := 0
		for j := 0; j < i; j++ {
			k := 0
			for i+k < len(s) && s[j+k] == s[i+k] {
				k++
			}
			best = max(best, k)
		}
		if best >= minRun {
			i += best
			continue
		}
		// A character continuing a sequence (abc, 321, zzz) is no
		// choice either.
		if i >= 2 && s[i]-s[i-1] == s[i-1]-s[i-2] && (s[i] == s[i-1]+1 || s[i]+1 == s[i-1] || s[i] == s[i-1]) {
			i++
			continue
		}
		novel++
		i++
	}
	return float64(novel)
}

// alphabet is the size of the alphabet s's character classes span.
func alphabet(s string) float64 {
	var digit, lowerHex, lower, upper, other bool
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r >= 'a' && r <= 'f':
			lowerHex = true
		case r >= 'g' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		default:
			other = true
		}
	}
	size := 0
	if digit {
		size += 10
	}
	switch {
	case lower:
		size += 26
	case lowerHex:
		size += 6
	}
	if upper {
		size += 26
	}
	if other {
		size += 32
	}
	return float64(max(size, 2))
}

// shannon is the entropy in bits per character of the frequencies counts
// (over n characters).
func shannon(counts map[rune]int, n int) float64 {
	h := 0.0
	for _, c := range counts {
		p := float64(c) / float64(n)
		h -= p * math.Log2(p)
	}
	return h
}
