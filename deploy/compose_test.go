// Package deploy_test checks the compose files offline (no Docker needed):
// they parse, the settings they give courier are settings courier has, the
// PostgreSQL variant runs two servers and two workers on one database whose
// max_connections their pools fit in, and the files they mount exist.
package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type service struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	DependsOn   any               `yaml:"depends_on"`
	Volumes     []string          `yaml:"volumes"`
}

type compose struct {
	Name     string             `yaml:"name"`
	Services map[string]service `yaml:"services"`
}

func load(t *testing.T, file string) compose {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return c
}

// courierServices are the services running the courier image.
func courierServices(c compose) map[string]service {
	out := map[string]service{}
	for name, s := range c.Services {
		if strings.HasPrefix(s.Image, "courier:") {
			out[name] = s
		}
	}
	return out
}

// dependsHealthy reports whether s waits for dep to be healthy.
func dependsHealthy(s service, dep string) bool {
	m, ok := s.DependsOn.(map[string]any)
	if !ok {
		return false
	}
	d, ok := m[dep].(map[string]any)
	return ok && d["condition"] == "service_healthy"
}

// defaultOf is the default of a "${NAME:-default}" value, or the value.
func defaultOf(v string) string {
	if m := regexp.MustCompile(`^\$\{[A-Z_]+:-([^}]*)\}$`).FindStringSubmatch(v); m != nil {
		return m[1]
	}
	return v
}

func TestComposeFiles(t *testing.T) {
	config, err := os.ReadFile(filepath.Join("..", "cmd", "courier", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"compose.yml", "compose.postgres.yaml"} {
		c := load(t, file)
		cs := courierServices(c)
		if len(cs) == 0 {
			t.Fatalf("%s: no courier service", file)
		}
		hostPorts := map[string]string{}
		for name, s := range c.Services {
			for _, p := range s.Ports {
				if !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("%s: %s publishes %s beyond loopback", file, name, p)
				}
				hp := strings.Join(strings.Split(p, ":")[:2], ":")
				if other, dup := hostPorts[hp]; dup {
					t.Errorf("%s: %s and %s both publish %s", file, name, other, hp)
				}
				hostPorts[hp] = name
			}
			for _, v := range s.Volumes {
				src, _, _ := strings.Cut(v, ":")
				if strings.HasPrefix(src, ".") {
					if _, err := os.Stat(src); err != nil {
						t.Errorf("%s: %s mounts %s: %v", file, name, src, err)
					}
				}
			}
		}
		for name, s := range cs {
			if len(s.Command) == 0 || (s.Command[0] != "serve" && s.Command[0] != "worker") {
				t.Errorf("%s: %s runs %v", file, name, s.Command)
			}
			for key := range s.Environment {
				if !strings.Contains(string(config), strconv.Quote(key)) {
					t.Errorf("%s: %s sets %s, which cmd/courier/config.go does not read", file, name, key)
				}
			}
			if s.Command[0] == "worker" && !dependsHealthy(s, "nats") {
				t.Errorf("%s: worker %s does not wait for NATS", file, name)
			}
		}
	}

	// The PostgreSQL variant.
	file := "compose.postgres.yaml"
	c := load(t, file)
	cs := courierServices(c)
	var servers, workers []string
	for name, s := range cs {
		if s.Command[0] == "serve" {
			if !slices.Contains(s.Command, "--worker=false") {
				t.Errorf("%s: %s runs a worker inside the server", file, name)
			}
			servers = append(servers, name)
		} else {
			workers = append(workers, name)
		}
		if db := s.Environment["COURIER_DB"]; !strings.HasPrefix(db, "postgres://") || !strings.Contains(db, "@postgres:5432/") {
			t.Errorf("%s: %s has COURIER_DB %q, want the postgres service's URL", file, name, db)
		}
		if s.Environment["EVENT_BUS_BACKEND"] != "nats" {
			t.Errorf("%s: %s is not on the nats bus", file, name)
		}
		if !dependsHealthy(s, "postgres") {
			t.Errorf("%s: %s does not wait for PostgreSQL", file, name)
		}
	}
	if len(servers) != 2 || len(workers) != 2 {
		t.Fatalf("%s: servers %v, workers %v; want two of each", file, servers, workers)
	}
	if _, ok := c.Services["nats"]; !ok {
		t.Errorf("%s: no nats service", file)
	}
	pg, ok := c.Services["postgres"]
	if !ok {
		t.Fatalf("%s: no postgres service", file)
	}
	maxConns := 100
	for i, a := range pg.Command {
		if v, ok := strings.CutPrefix(a, "max_connections="); ok && i > 0 && pg.Command[i-1] == "-c" {
			if maxConns, err = strconv.Atoi(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each process: its pool plus the LISTEN connection; PostgreSQL keeps
	// 3 connections for superusers.
	need := 0
	for name, s := range cs {
		n, err := strconv.Atoi(defaultOf(s.Environment["COURIER_POSTGRES_CONNS"]))
		if err != nil {
			t.Fatalf("%s: %s: COURIER_POSTGRES_CONNS: %v", file, name, err)
		}
		need += n + 1
	}
	if need > maxConns-3 {
		t.Errorf("%s: the processes open up to %d connections, max_connections is %d", file, need, maxConns)
	}
	// Prometheus scrapes every courier process of the variant.
	prom, err := os.ReadFile(filepath.Join("prometheus", "prometheus.postgres.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range servers {
		if !strings.Contains(string(prom), `"`+name+`:9464"`) {
			t.Errorf("prometheus.postgres.yml does not scrape %s", name)
		}
	}
	for _, name := range workers {
		if !strings.Contains(string(prom), `"`+name+`:9465"`) {
			t.Errorf("prometheus.postgres.yml does not scrape %s", name)
		}
	}
}
