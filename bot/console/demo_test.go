package console

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestIsYes(t *testing.T) {
	tok := "0123456789abcdef0123456789abcdef"
	for _, a := range []string{"y", "YES\n", " yes ", "confirm " + tok, "/confirm " + strings.ToUpper(tok) + "\n"} {
		if !IsYes(a, tok) {
			t.Errorf("%q is not taken as a yes", a)
		}
	}
	for _, a := range []string{"", "n", "no", "confirm", "confirm 00", "confirm " + tok + " now", "yes please"} {
		if IsYes(a, tok) {
			t.Errorf("%q is taken as a yes", a)
		}
	}
	if IsYes("confirm ", "") {
		t.Error("an empty token confirmed")
	}
}

// readLines gives every line of any length: a line over the limit comes as
// its length only, and the lines after it still come.
func TestReadLinesTooLong(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	in := "help\n" + long + "\n" + "gpu status\r\n" + strings.Repeat("y", 11) + "\nlast"
	out := make(chan inputLine)
	go readLines(context.Background(), strings.NewReader(in), 10, out)
	var got []inputLine
	for l := range out {
		got = append(got, l)
	}
	want := []inputLine{{text: "help"}, {tooLong: 1 << 20}, {text: "gpu status"}, {tooLong: 11}, {text: "last"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A read error ends the input with the error, after the lines before it.
func TestReadLinesError(t *testing.T) {
	out := make(chan inputLine)
	go readLines(context.Background(), io.MultiReader(strings.NewReader("help\n"), errReader{}), 10, out)
	var got []inputLine
	for l := range out {
		got = append(got, l)
	}
	if len(got) != 2 || got[0].text != "help" || got[1].err == nil {
		t.Fatalf("got %+v", got)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
