// Package unpack copies the repository's committed data files (tokenizers,
// traces, some gzipped) into a working directory, decompressing the .gz
// ones, and digests a directory so that a copy is made again only when its
// source changed. The test harness (internal/fixtures) and the local
// fleets of the binary (dev, bench --live) share it.
package unpack

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File copies the file at path into dir with permissions perm, creating
// it (it must not exist yet). A name ending in .gz is decompressed and
// the suffix dropped. Errors are the file system's, or gzip's with path
// in front.
func File(path, dir string, perm os.FileMode) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	name := filepath.Base(path)
	var r io.Reader = in
	if filepath.Ext(name) == ".gz" {
		zr, err := gzip.NewReader(in)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r, name = zr, name[:len(name)-len(".gz")]
	}
	out, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	if _, err := io.Copy(out, r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// DirSHA256 is the hex SHA-256 of the names and contents of the files
// directly in dir, in name order: equal digests mean equal sources.
func DirSHA256(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range ents { // ReadDir sorts by name
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", e.Name())
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
