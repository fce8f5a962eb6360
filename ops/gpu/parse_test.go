package gpu

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseGPUs(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []GPU
	}{
		{"plain", "0, 81234, 81559\n1, 0, 81559\n", []GPU{{0, 81234, 81559, true, ""}, {1, 0, 81559, true, ""}}},
		{"spaces and blank lines", "\n  0 ,  5 , 81559  \r\n\n1,7,81559", []GPU{{0, 5, 81559, true, ""}, {1, 7, 81559, true, ""}}},
		{"header and units", "index, memory.used [MiB], memory.total [MiB]\n0, 12 MiB, 81559 MiB\n", []GPU{{0, 12, 81559, true, ""}}},
		{"n/a", "0, [N/A], [N/A]\n1, [Not Supported], 81559\n2, N/A, 10\n", []GPU{{0, -1, -1, false, ""}, {1, -1, 81559, false, ""}, {2, -1, 10, false, ""}}},
		{"two fields", "3, 100\n", []GPU{{3, 100, -1, true, ""}}},
		{"uuid", "0, 5, 81559, GPU-3f2a7c10-5c1e\n1, 0, 81559, [N/A]\n", []GPU{{0, 5, 81559, true, "GPU-3f2a7c10-5c1e"}, {1, 0, 81559, true, ""}}},
		{"empty", "", nil},
	} {
		got, err := ParseGPUs([]byte(tc.in))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v %v, want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{"0\n", "x, 1, 2\n", "0, 1, 2, 3\n", "0, 1, 2, GPU-a, 5\n", "0, lots, 2\n", "-1, 0, 0\n", "0, 1, 2\n0, 1, 2\n", "0, -5, 10\n",
		"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."} {
		_, err := ParseGPUs([]byte(bad))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%q: err %v, want *ParseError", bad, err)
		}
	}
}

func TestParseApps(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []App
	}{
		{"none", "", nil},
		{"no running processes text", "No running processes found\n", nil},
		{"rows", "12345, 80123\n12346, 80000\n12345, 10\n", []App{{12345, 80123, ""}, {12346, 80000, ""}, {12345, 10, ""}}},
		{"n/a memory", "4242, [N/A]\n4243, [Not Supported]\n", []App{{4242, -1, ""}, {4243, -1, ""}}},
		{"header units blanks", "pid, used_gpu_memory [MiB]\n\n 7 , 5 MiB \n", []App{{7, 5, ""}}},
		{"gpu uuid", "7, 5, GPU-aa\n8, 6, MIG-bb\n", []App{{7, 5, "GPU-aa"}, {8, 6, "MIG-bb"}}},
	} {
		got, err := ParseApps([]byte(tc.in))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v %v, want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{"abc, 5\n", "0, 5\n", "5\n", "5, 6, 7\n", "5, many\n"} {
		if _, err := ParseApps([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParsePS(t *testing.T) {
	out := "   4242       1 Sl   sglang::scheduler_TP0\n 1300  1  Ss   /usr/bin/nvidia-persistenced --user  nvidia-persistenced\n   77   1 Z    [python3] <defunct>\n   78   1 D\n"
	got, err := ParsePS([]byte(out), 4)
	want := []PSRow{{4242, 1, "Sl", "sglang::scheduler_TP0"}, {1300, 1, "Ss", "/usr/bin/nvidia-persistenced --user  nvidia-persistenced"},
		{77, 1, "Z", "[python3] <defunct>"}, {78, 1, "D", ""}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v %v", got, err)
	}
	got, err = ParsePS([]byte(" 4242 Dl\n4243 S\n"), 2)
	if err != nil || !reflect.DeepEqual(got, []PSRow{{PID: 4242, Stat: "Dl"}, {PID: 4243, Stat: "S"}}) {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"PID PPID STAT COMMAND\n", "1 x S a\n", "1 1 Q a\n", "1\n"} {
		if _, err := ParsePS([]byte(bad), 4); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParsePS([]byte("1 S extra\n"), 2); err == nil {
		t.Error("extra column accepted")
	}
}

func TestParseFuser(t *testing.T) {
	got, err := ParseFuser([]byte(" 4242 4243 1300m\n"))
	if err != nil || !reflect.DeepEqual(got, []int{4242, 4243, 1300}) {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := ParseFuser(nil); err != nil || got != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
	if _, err := ParseFuser([]byte("/dev/nvidia0: 12")); err == nil {
		t.Fatal("file name accepted as a PID")
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		cmd            string
		engine, daemon bool
	}{
		{"sglang::scheduler_TP0", true, false},
		{"sglang::detokenizer", true, false},
		{"/opt/sglang/.venv/bin/python3 -m sglang.launch_server --model-path /m --tp 4", true, false},
		{"VLLM::EngineCore", true, false},
		{"VLLM::Worker_TP3", true, false},
		{"/opt/vllm/.venv/bin/vllm serve /models/Qwen --port 8000", true, false},
		{"python3 -m vllm.entrypoints.openai.api_server --model x", true, false},
		{"/usr/bin/nvidia-persistenced --user nvidia-persistenced", false, true},
		{"/usr/bin/nv-hostengine -n --service-account nvidia-dcgm", false, true},
		{"/usr/bin/dcgm-exporter -f /etc/dcgm.csv", false, true},
		{"/usr/lib/xorg/Xorg -core :0", false, true},
		{"python3 stray.py", false, false},
		{"python3 train.py --note vllm", false, false},
		{"", false, false},
	} {
		if e, d := IsEngine(tc.cmd), IsDaemon(tc.cmd); e != tc.engine || d != tc.daemon {
			t.Errorf("%q: engine %v daemon %v, want %v %v", tc.cmd, e, d, tc.engine, tc.daemon)
		}
	}
}
