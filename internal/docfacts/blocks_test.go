package main

import (
	"strings"
	"testing"
)

func TestRender_ReplacesOnlyTheBodiesBetweenMarkers(t *testing.T) {
	in := "intro\n<!-- facts:a -->\nstale a\n<!-- /facts:a -->\nmiddle\n  <!-- facts:b -->\n  <!-- /facts:b -->\nend\n"
	gen := func(name string) (string, error) { return "fresh " + name, nil }
	out, changed, err := render(in, gen)
	if err != nil {
		t.Fatal(err)
	}
	want := "intro\n<!-- facts:a -->\nfresh a\n<!-- /facts:a -->\nmiddle\n  <!-- facts:b -->\nfresh b\n  <!-- /facts:b -->\nend\n"
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if strings.Join(changed, ",") != "a,b" {
		t.Fatalf("changed %v, want a and b", changed)
	}
	// A second run over its own output changes nothing.
	again, changed, err := render(out, gen)
	if err != nil || again != out || len(changed) != 0 {
		t.Fatalf("second run: changed %v, err %v, text changed %v", changed, err, again != out)
	}
}

func TestFindBlocks_RefusesBadMarkersNamingTheLine(t *testing.T) {
	for in, want := range map[string]string{
		"<!-- facts:a -->\ntext\n":                              `block "a" is not closed`,
		"<!-- /facts:a -->\n":                                   `line 1: closes block "a", which is not open`,
		"<!-- facts:a -->\n<!-- /facts:b -->\n":                 `line 2: closes block "b"`,
		"<!-- facts:a -->\n<!-- facts:b -->\n<!-- /facts:b -->": `line 2: block "b" opened inside block "a"`,
	} {
		if _, err := findBlocks(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// A block's opening marker may carry arguments after the name; the
// generator gets them all, and the closing marker names the generator
// alone.
func TestRender_PassesTheArgumentsAndClosesByName(t *testing.T) {
	in := "<!-- facts:h  run-1 +x -->\nold\n<!-- /facts:h -->\n"
	var got []string
	out, changed, err := render(in, func(spec string) (string, error) { got = append(got, spec); return "new", nil })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "h  run-1 +x" || strings.Join(changed, ",") != "h  run-1 +x" ||
		out != "<!-- facts:h  run-1 +x -->\nnew\n<!-- /facts:h -->\n" {
		t.Fatalf("specs %q, changed %q, text %q", got, changed, out)
	}
	if _, err := findBlocks("<!-- facts:h run-1 -->\n<!-- /facts:h run-1 -->\n"); err == nil {
		t.Fatal("a closing marker with arguments closed the block")
	}
}
