package bench

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

func parse(t *testing.T, body string) (stream, error) {
	t.Helper()
	var s stream
	var scratch []byte
	err := readStream(bufio.NewReaderSize(strings.NewReader(body), 64), &s, &scratch)
	return s, err
}

func TestReadStream(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300) // longer than the 64-byte test buffer
	usage := `data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9}}` + "\n\n"
	for _, tc := range []struct {
		name     string
		body     string
		chunks   int
		tokens   int
		usage    bool
		errMatch string
	}{
		{"crlf and no space", "data:{\"choices\":[{\"text\":\"a\"}]}\r\n\r\n" + strings.ReplaceAll(usage, "\n", "\r\n") + "data:[DONE]\r\n\r\n", 1, 9, true, ""},
		{"long line", `data: {"choices":[{"text":"` + long + `"}]}` + "\n\n" + usage + "data: [DONE]\n\n", 1, 9, true, ""},
		{"empty text is no content", `data: {"choices":[{"text":""}]}` + "\n" + `data: {"choices":[{"delta":{"content":null}}]}` + "\n" + usage, 0, 9, true, ""},
		{"escaped key inside text", `data: {"choices":[{"text":"","logprobs":"\"text\":\"zz"}]}` + "\n" + usage, 0, 9, true, ""},
		{"reasoning content counts", `data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}` + "\n" + usage, 1, 9, true, ""},
		{"spaces around colon", `data: {"choices": [{"text" : "a"}], "usage" : null}` + "\n" + usage, 1, 9, true, ""},
		{"content and usage in one chunk", `data: {"choices":[{"text":"ab"}],"usage":{"completion_tokens":2}}` + "\n", 1, 2, true, ""},
		{"finish_reason error is not an error", `data: {"choices":[{"text":"a","finish_reason":"error"}]}` + "\n" + usage, 1, 9, true, ""},
		{"error object", `data: {"choices":[{"text":"a"}]}` + "\n" + `data: {"error":{"message":"boom","code":500}}` + "\n", 1, 0, false, "error in stream: boom"},
		{"vllm error object", `data: {"object":"error","message":"too long","type":"BadRequestError"}` + "\n", 0, 0, false, "error in stream: too long"},
		{"error string", `data: {"error":"plain"}` + "\n", 0, 0, false, "error in stream: plain"},
		{"bad json", `data: {"usage":{` + "\n", 0, 0, false, "bad chunk"},
		{"stops at done", usage + "data: [DONE]\n\ndata: {\"error\":\"after done\"}\n", 0, 9, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parse(t, tc.body)
			if tc.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
					t.Fatalf("err %v, want %q", err, tc.errMatch)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.chunks != tc.chunks || s.outTokens != tc.tokens || s.hasUsage != tc.usage {
				t.Fatalf("chunks %d tokens %d usage %v; want %d %d %v", s.chunks, s.outTokens, s.hasUsage, tc.chunks, tc.tokens, tc.usage)
			}
		})
	}
	_, err := parse(t, `data: {"error":{"message":"x"}}`+"\n")
	var se *StreamError
	if !errors.As(err, &se) || se.Message != "x" {
		t.Fatalf("not a *StreamError: %v", err)
	}
}
