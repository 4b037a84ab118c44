package compose

import (
	"os/exec"
	"path/filepath"
	"strings"
)

// --- commands ----------------------------------------------------------

func (s *stack) composeTry(args ...string) (string, error) {
	file, _ := filepath.Abs("docker-compose.yml")
	full := append(append(append([]string{}, s.compose[1:]...), "-p", s.project, "-f", file), args...)
	cmd := exec.Command(s.compose[0], full...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *stack) composeRun(args ...string) string {
	s.t.Helper()
	out, err := s.composeTry(args...)
	if err != nil {
		s.t.Fatalf("%s %s: %v\n%s", strings.Join(s.compose, " "), strings.Join(args, " "), err, out)
	}
	return out
}

func (s *stack) dockerTry(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}

func (s *stack) docker(args ...string) string {
	s.t.Helper()
	out, err := s.dockerTry(args...)
	if err != nil {
		s.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
