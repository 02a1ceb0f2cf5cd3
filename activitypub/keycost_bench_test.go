package activitypub

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"math/big"
	"testing"
	"time"
)

// BenchmarkKeyBounds measures the CPU one PKCS#1 v1.5 check costs with the
// costliest RSA key ParsePublicKeyPEM accepts (MaxRemoteKeyBits, exponent
// MaxRemoteKeyExponent) and with the 47,200-bit key of exponent 2^31-1 it
// refuses, each as a multiple of a 2048-bit key's in the same run (the
// modular exponentiation runs whether or not the signature matches, so a
// modulus of the size is enough). Run it with
//
//	go test ./activitypub/ -run '^$' -bench BenchmarkKeyBounds -benchtime 1x
func BenchmarkKeyBounds(b *testing.B) {
	per := func(bits, e, n int) time.Duration {
		m := new(big.Int).Lsh(big.NewInt(1), uint(bits-1))
		m.Add(m, big.NewInt(0x1234567))
		pub := &rsa.PublicKey{N: m, E: e}
		sig := make([]byte, pub.Size())
		sig[1] = 1
		h := sha256.Sum256([]byte("courier"))
		start := time.Now()
		for range n {
			_ = rsa.VerifyPKCS1v15(pub, crypto.SHA256, h[:], sig)
		}
		return time.Since(start) / time.Duration(n)
	}
	for range b.N {
		per(2048, 65537, 200) // warm up
		base := per(2048, 65537, 2000)
		largest := per(MaxRemoteKeyBits, MaxRemoteKeyExponent, 300)
		attack := per(47200, 1<<31-1, 3)
		b.ReportMetric(float64(base.Microseconds()), "µs_2048")
		b.ReportMetric(float64(largest)/float64(base), "largest_accepted_ratio")
		b.ReportMetric(float64(attack)/float64(base), "refused_attack_ratio")
	}
}
