package engine

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DecodeLine is one engine log line about speculative decoding.
//
// SGLang prints a "Decode batch" line every --decode-log-interval decode
// iterations: Running is #running-req, AcceptLen the accept len (0 when not
// speculating), AcceptRate the printed accept rate (HasRate; its meaning
// changed in 2026-04, see DOMAIN notes: a cross-check only), GenTokS the gen
// throughput. vLLM prints "SpecDecoding metrics: Mean acceptance length: X"
// (Engine "vllm"; AcceptRate from "Avg Draft acceptance rate: P%").
//
// Time is the line's own timestamp when it has one (SGLang
// "[2026-07-21 15:00:13 TP0 EP0]", vLLM "INFO 07-21 15:00:13"), read in the
// local time zone (vLLM's year-less stamp gets the current year); zero
// otherwise.
type DecodeLine struct {
	Time       time.Time
	Engine     string // "sglang" or "vllm"
	Running    int
	AcceptLen  float64
	AcceptRate float64
	HasRate    bool
	GenTokS    float64
}

const num = `([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)`

var (
	reDecode   = regexp.MustCompile(`Decode batch[.,:]`)
	reRunning  = regexp.MustCompile(`#running-req: ([0-9]+)`)
	reAccLen   = regexp.MustCompile(`accept len: ` + num)
	reAccRate  = regexp.MustCompile(`accept rate: ` + num)
	reGen      = regexp.MustCompile(`gen throughput \(token/s\): ` + num)
	reSGLTime  = regexp.MustCompile(`\[([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2})[ \]]`)
	reVLLM     = regexp.MustCompile(`SpecDecoding metrics: Mean acceptance length: ` + num)
	reVLLMRate = regexp.MustCompile(`Avg Draft acceptance rate: ` + num + `%`)
	reVLLMTime = regexp.MustCompile(`(?:INFO|DEBUG|WARNING)\s+([0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2})`)
)

// ParseDecodeLine recognises SGLang decode lines in every format (new, with
// accept rate; older "Decode batch." with a trailing comma; hybrid models'
// "#full token:") and vLLM's SpecDecoding line. Fields are found by regular
// expression, not position. ok is false for any other line.
func ParseDecodeLine(line string) (DecodeLine, bool) {
	if strings.Contains(line, "Decode batch") && reDecode.MatchString(line) {
		d := DecodeLine{Engine: "sglang"}
		if m := reRunning.FindStringSubmatch(line); m != nil {
			n, err := strconv.Atoi(m[1])
			if err != nil {
				return DecodeLine{}, false
			}
			d.Running = n
		}
		d.AcceptLen = findFloat(reAccLen, line)
		if m := reAccRate.FindStringSubmatch(line); m != nil {
			d.AcceptRate, d.HasRate = parseF(m[1]), true
		}
		d.GenTokS = findFloat(reGen, line)
		if m := reSGLTime.FindStringSubmatch(line); m != nil {
			if t, err := time.ParseInLocation(time.DateTime, m[1], time.Local); err == nil {
				d.Time = t
			}
		}
		return d, true
	}
	if strings.Contains(line, "SpecDecoding metrics") {
		m := reVLLM.FindStringSubmatch(line)
		if m == nil {
			return DecodeLine{}, false
		}
		d := DecodeLine{Engine: "vllm", AcceptLen: parseF(m[1])}
		if m := reVLLMRate.FindStringSubmatch(line); m != nil {
			d.AcceptRate, d.HasRate = parseF(m[1])/100, true
		}
		if m := reVLLMTime.FindStringSubmatch(line); m != nil {
			now := time.Now()
			if t, err := time.ParseInLocation("2006-01-02 15:04:05", strconv.Itoa(now.Year())+"-"+m[1], time.Local); err == nil {
				if t.After(now.Add(24 * time.Hour)) {
					t = t.AddDate(-1, 0, 0)
				}
				d.Time = t
			}
		}
		return d, true
	}
	return DecodeLine{}, false
}

func findFloat(re *regexp.Regexp, line string) float64 {
	if m := re.FindStringSubmatch(line); m != nil {
		return parseF(m[1])
	}
	return 0
}

func parseF(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return f
}
