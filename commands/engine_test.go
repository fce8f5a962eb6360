package commands

import (
	"reflect"
	"testing"
)

var optsEngines = Options{
	Services: []ServiceRef{{Name: "qwen", Host: "gpu1", Engine: "sglang"}, {Name: "vq", Host: "gpu2", Engine: "vllm"}},
	Hosts:    []string{"gpu1", "gpu2"},
}

// engine set parses the flag without its dashes and the value as the
// engine checks it, and renders canonically; Text round-trips.
func TestParseEngineSet(t *testing.T) {
	for _, c := range []struct {
		opts Options
		in   string
		text string
		want Command
	}{
		{optsOne, "engine set mem-fraction-static 0.8", "engine set mem-fraction-static 0.8 qwen", &EngineSet{On: onQwen, Flag: "mem-fraction-static", Value: "0.8"}},
		{optsOne, "engine set Mem_Fraction_Static .80 qwen --dry-run", "engine set mem-fraction-static 0.8 qwen --dry-run", &EngineSet{On: onQwen, Flag: "mem-fraction-static", Value: "0.8", DryRun: true}},
		{optsOne, "engine set chunked-prefill-size -1", "engine set chunked-prefill-size -1 qwen", &EngineSet{On: onQwen, Flag: "chunked-prefill-size", Value: "-1"}},
		{optsOne, "engine set disable-cuda-graph on", "engine set disable-cuda-graph true qwen", &EngineSet{On: onQwen, Flag: "disable-cuda-graph", Value: "true"}},
		{optsEngines, "engine set max-model-len 32768 vq", "engine set max-model-len 32768 vq", &EngineSet{On: On{Service: "vq", Host: "gpu2"}, Flag: "max-model-len", Value: "32768"}},
		{optsOne, "engine show", "engine show qwen", &EngineShow{On: onQwen}},
	} {
		got, err := Parse(c.in, c.opts)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) || Text(got) != c.text {
			t.Errorf("%q: %+v %q, want %+v %q", c.in, got, Text(got), c.want, c.text)
		}
		if again, err := Parse(Text(got), c.opts); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("%q: Text does not round-trip: %+v %v", c.in, again, err)
		}
	}
}

// Refusals say what is wrong and what to type, before anything runs.
func TestParseEngineSetBad(t *testing.T) {
	for _, c := range []struct {
		opts                Options
		in, problem, suggst string
	}{
		{optsOne, "engine set mem-fraction-static 1.2", "mem-fraction-static must be above 0 and below 1, got 1.2", ""},
		{optsOne, "engine set mem-fraction-static 0", "mem-fraction-static must be above 0 and below 1, got 0", ""},
		{optsOne, "engine set mem-fraction-static 8e-1", `mem-fraction-static takes a decimal number above 0 and below 1 (like 0.8); got "8e-1"`, ""},
		{optsOne, "engine set cuda-graph-max-bs 0", "cuda-graph-max-bs must be 1..4096, got 0", ""},
		{optsOne, "engine set chunked-prefill-size -2", "chunked-prefill-size must be 1..1048576 (or -1: off), got -2", ""},
		{optsOne, "engine set disable-cuda-graph maybe", `disable-cuda-graph is a switch: give true or false, not "maybe"`, ""},
		{optsOne, "engine set mem-fraction-statik 0.8", `opsbot does not set "mem-fraction-statik": the engine flags it sets are ` + engineFlagNames(), "did you mean `engine set mem-fraction-static 0.8`?"},
		{optsOne, "engine set --mem-fraction-static 0.8", "write the engine flag without its dashes: mem-fraction-static", "did you mean `engine set mem-fraction-static 0.8`?"},
		{optsOne, "engine set qwen mem-fraction-static 0.8", `"qwen" is a service: the FLAG comes first, the service last`, "did you mean `engine set mem-fraction-static 0.8 qwen`?"},
		{optsOne, "engine set mem-fraction-static", "engine set needs a VALUE after the FLAG", "for example `engine set mem-fraction-static 0.8`"},
		{optsEngines, "engine set mem-fraction-static 0.8 vq", "--mem-fraction-static is SGLang's; vq runs vLLM", "its counterpart is --gpu-memory-utilization: `engine set gpu-memory-utilization 0.8 vq`"},
		{optsEngines, "engine set max-model-len 4096 qwen", "--max-model-len is vLLM's; qwen runs SGLang", "`engine show qwen` lists the flags of its engine"},
	} {
		_, err := Parse(c.in, c.opts)
		ue, ok := err.(*UsageError)
		if !ok {
			t.Errorf("%q: %v, want a usage error", c.in, err)
			continue
		}
		if ue.Problem != c.problem || ue.Suggestion != c.suggst {
			t.Errorf("%q:\n got %q / %q\nwant %q / %q", c.in, ue.Problem, ue.Suggestion, c.problem, c.suggst)
		}
	}
}
