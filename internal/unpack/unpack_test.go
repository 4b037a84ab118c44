package unpack

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFile_DecompressesGzAndCopiesTheRest(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "tokenizer.json.gz"), gz(t, []byte(`{"model":{}}`)))
	write(t, filepath.Join(src, "README"), []byte("plain"))
	for _, n := range []string{"tokenizer.json.gz", "README"} {
		if err := File(filepath.Join(src, n), dst, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"tokenizer.json": `{"model":{}}`, "README": "plain"} {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "tokenizer.json.gz")); !os.IsNotExist(err) {
		t.Errorf("the .gz name was kept: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dst, "README"))
	if err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("README mode = %v, %v; want read-only as asked", fi.Mode(), err)
	}
}

func TestFile_RefusesToOverwriteAndNamesABadGz(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "a"), []byte("new"))
	write(t, filepath.Join(dst, "a"), []byte("old"))
	if err := File(filepath.Join(src, "a"), dst, 0o644); !os.IsExist(err) {
		t.Errorf("over an existing file: err = %v, want exists", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a")); string(b) != "old" {
		t.Errorf("the existing file became %q", b)
	}
	bad := filepath.Join(src, "bad.gz")
	write(t, bad, []byte("not gzip"))
	err := File(bad, dst, 0o644)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(bad)) {
		t.Errorf("bad gzip: err = %v, want one naming %s", err, bad)
	}
}

func TestDirSHA256_FollowsNamesAndContents(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a"), []byte("x"))
	s1, err := DirSHA256(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := DirSHA256(dir); again != s1 {
		t.Fatalf("same directory, digests %s and %s", s1, again)
	}
	write(t, filepath.Join(dir, "a"), []byte("y"))
	s2, _ := DirSHA256(dir)
	if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	s3, _ := DirSHA256(dir)
	if s1 == s2 || s2 == s3 {
		t.Errorf("digests %s, %s, %s: a changed content or name must change it", s1, s2, s3)
	}
	if len(s1) != 64 {
		t.Errorf("digest %q is not hex SHA-256", s1)
	}
}
