package doccheck

import (
	"strings"
	"testing"
)

func TestMarkdown(t *testing.T) {
	src := strings.Join([]string{
		"# Title",                               // 1
		"",                                      // 2
		"```hcl",                                // 3
		`tier "a" {}`,                           // 4
		"```",                                   // 5
		"```sh",                                 // 6
		"make test",                             // 7
		"```",                                   // 8
		"1. A list item:",                       // 9
		"",                                      // 10
		"   ```hcl",                             // 11
		`   plugin "x" {`,                       // 12
		"   }",                                  // 13
		"   ```",                                // 14
		"<!-- not checked: needs a cluster -->", // 15
		"",                                      // 16
		"```HCL",                                // 17
		"job {}",                                // 18
		"```",                                   // 19
		"````hcl",                               // 20
		"```",                                   // 21
		"````",                                  // 22
	}, "\n")
	got, err := Markdown("doc.md", src)
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{File: "doc.md", Line: 4, Text: "tier \"a\" {}\n", Fragment: true},
		{File: "doc.md", Line: 12, Text: "plugin \"x\" {\n}\n", Fragment: true},
		{File: "doc.md", Line: 18, Text: "job {}\n", Fragment: true, NotChecked: "needs a cluster"},
		{File: "doc.md", Line: 21, Text: "```\n", Fragment: true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d examples, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("example %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	if name := got[0].Name(); name != "doc.md:3" {
		t.Errorf("Name() = %q, want doc.md:3 (the opening fence)", name)
	}
}

func TestMarkdownErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unclosed fence", "text\n```hcl\ntier \"a\" {}\n", "doc.md:2: code fence ``` is never closed"},
		{"marker without a reason", "<!-- not checked: -->\n```hcl\nx {}\n```\n", "must say why"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Markdown("doc.md", tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
