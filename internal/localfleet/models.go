package localfleet

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/inference-cache/inference-cache/internal/unpack"
)

// Model is the model the local fleets (dev, bench --live) serve: the
// Qwen3 tokenizer and chat template committed under
// testdata/tokenizers/qwen3.
const Model = "qwen3"

// modelSource is where the committed tokenizer lies, relative to the
// repository root.
var modelSource = filepath.Join("testdata", "tokenizers", Model)

// repoFile finds rel (a path relative to the repository root) for a
// binary run from a clone: at or above the working directory, else at or
// above the executable's directory (bin/inference-cache run from
// elsewhere). The error says where it looked.
func repoFile(rel string) (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			p := filepath.Join(d, rel)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("no %s at or above %v: run from a clone of the repository", rel, starts)
}

// ModelsDir returns a models directory (<dir>/<model>/tokenizer.json,
// tokenizer_config.json) holding Model for the fleet's engines and
// proxy: given, when the user passed one (it must hold Model), else
// <dir>/models, unpacked there from the repository's testdata (the .gz
// files decompressed) unless an earlier run already did from the same
// files. The copy is made beside its final name and renamed into place,
// so a run stopped half way leaves no partial model.
func ModelsDir(dir, given string) (string, error) {
	if given != "" {
		if _, err := os.Stat(filepath.Join(given, Model, "tokenizer.json")); err != nil {
			return "", fmt.Errorf("--models-dir %s: the fleet serves model %q and needs %s: %w", given, Model,
				filepath.Join(given, Model, "tokenizer.json"), err)
		}
		return given, nil
	}
	src, err := repoFile(modelSource)
	if err != nil {
		return "", fmt.Errorf("the fleet's tokenizer: %w (or pass --models-dir with %s/tokenizer.json)", err, Model)
	}
	sum, err := unpack.DirSHA256(src)
	if err != nil {
		return "", err
	}
	models := filepath.Join(dir, "models")
	dst := filepath.Join(models, Model)
	stamp := filepath.Join(dst, ".source-sha256")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == sum {
		return models, nil
	}
	if err := os.MkdirAll(models, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(models, Model+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ents, err := os.ReadDir(src)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if err := unpack.File(filepath.Join(src, e.Name()), tmp, 0o644); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".source-sha256"), []byte(sum), 0o644); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dst); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	return models, nil
}
