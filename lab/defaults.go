package lab

// defaultUnit returns the seeded unit text for an engine flavour: the incident's SGLang service
// with MTP (NEXTN) at steps 3, topk 1, draft tokens 4 on 4 GPUs, or its vLLM equivalent.
func defaultUnit(engine string) string {
	if engine == "vllm" {
		return `[Unit]
Description=vLLM Qwen3.5-122B-A10B (MTP)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=root
WorkingDirectory=/opt/vllm
Environment=CUDA_VISIBLE_DEVICES=0,1,2,3
Environment="VLLM_USE_V1=1" HF_HUB_OFFLINE=1
ExecStart=/opt/vllm/.venv/bin/vllm serve /models/Qwen3.5-122B-A10B \
    --served-model-name qwen \
    --host 0.0.0.0 --port 8000 \
    --tensor-parallel-size 4 \
    --gpu-memory-utilization 0.90 \
    --max-model-len 32768 \
    --speculative-config '{"method":"mtp","num_speculative_tokens":3}'
Restart=always
RestartSec=5
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`
	}
	return `[Unit]
Description=SGLang Qwen3.5-122B-A10B (MTP)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=root
WorkingDirectory=/opt/sglang
Environment=CUDA_VISIBLE_DEVICES=0,1,2,3
Environment="PYTHONUNBUFFERED=1" SGLANG_DISABLE_OUTLINES_DISK_CACHE=1
ExecStart=/opt/sglang/.venv/bin/python3 -m sglang.launch_server \
    --model-path /models/Qwen3.5-122B-A10B \
    --served-model-name qwen \
    --host 0.0.0.0 --port 30000 \
    --tp 4 \
    --mem-fraction-static 0.88 \
    --context-length 32768 \
    --speculative-algorithm NEXTN \
    --speculative-num-steps 3 \
    --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 \
    --enable-metrics
Restart=always
RestartSec=5
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`
}

// coderUnit is the neighbour's service: another team's SGLang coder model in LXC 130 on GPUs 4-7
// of the same node, with its own port and model (MTP at steps 3 too).
const coderUnit = `[Unit]
Description=SGLang Qwen3-Coder-30B-A3B-Instruct
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=root
WorkingDirectory=/opt/sglang
Environment=CUDA_VISIBLE_DEVICES=4,5,6,7
Environment="PYTHONUNBUFFERED=1"
ExecStart=/opt/sglang/.venv/bin/python3 -m sglang.launch_server \
    --model-path /models/Qwen3-Coder-30B-A3B-Instruct \
    --served-model-name coder \
    --host 0.0.0.0 --port 30001 \
    --tp 4 \
    --mem-fraction-static 0.85 \
    --context-length 65536 \
    --speculative-algorithm NEXTN \
    --speculative-num-steps 3 \
    --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 \
    --enable-metrics
Restart=always
RestartSec=5
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`

// DefaultUnit is the unit text the lab seeds qwen with for engine ("sglang"
// or "vllm"): a base for a --lab-unit that changes one line of it.
func DefaultUnit(engine string) string { return defaultUnit(engine) }
