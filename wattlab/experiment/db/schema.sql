-- wattlab results database, schema version 8. Units are in the column names.
-- One row per run in `runs`; a run's windows (warm-up, each epoch, evaluation, the whole run)
-- in `windows`; its power trace in `trace`. Rows of one run are written in one transaction.

CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);  -- ('app', 'wattlab'), ('schema_version', '9'), written by store.py

CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sweep TEXT,                      -- sweep name, NULL for a lone `wattlab run`
  status TEXT NOT NULL,            -- 'running' | 'ok' | 'failed' | 'abandoned' (left by a dead process)
  error TEXT,                      -- the error, when failed
  config_hash TEXT NOT NULL,       -- RunConfig.config_hash()
  repetition INTEGER NOT NULL DEFAULT 0,
  config_json TEXT NOT NULL,       -- the full RunConfig
  label TEXT NOT NULL,             -- "resnet50 2xGPU amp-bf16 250W bs256"
  model TEXT, stem TEXT, dataset TEXT, precision TEXT,
  device TEXT,                     -- 'cuda' | 'cpu'
  gpus INTEGER,                    -- GPU count (0 on the CPU)
  world_size INTEGER,              -- processes
  batch_size INTEGER,              -- global batch
  epochs REAL,                     -- epochs done within the budget
  power_limit_w REAL,              -- per-GPU limit in force (W); NULL when not read
  power_limit_requested_w REAL,    -- what the config asked for; NULL = default limit
  samples INTEGER,                 -- training samples in the budget (all ranks)
  started_at TEXT,                 -- UTC ISO-8601
  finished_at TEXT,
  hostname TEXT,                   -- comma-separated when several hosts
  gpu_name TEXT, gpu_uuids TEXT, driver TEXT, cpu_model TEXT,
  duration_s REAL,                 -- the budget's training time (warm-up and evaluation excluded)
  wall_s REAL,                     -- the whole run, start to end, evaluation included
  energy_total_j REAL,             -- budget window, all components, all ranks, each once
  energy_gpu_j REAL, energy_cpu_j REAL, energy_dram_j REAL, energy_other_j REAL,
  energy_uncertainty_j REAL,
  provenance TEXT,                 -- by share: '93.1 % measured, 6.9 % estimated'; one word
                                   -- ('measured', 'sampled', 'estimated') only when it is all
  components_json TEXT,            -- {component: {energy_j, provenance, uncertainty_j}}
  co2e_kg REAL, co2e_low_kg REAL, co2e_high_kg REAL,
  intensity_kg_per_kwh REAL, pue REAL,
  accuracy REAL, f1_macro REAL, train_loss REAL,
  codecarbon_energy_j REAL, codecarbon_co2e_kg REAL, codecarbon_rel_error REAL,
  codecarbon_components_json TEXT, -- {gpu_j, cpu_j, ram_j}
  projected_energy_j REAL, projected_duration_s REAL, projection_error REAL,
  gpu_utilization_percent REAL,    -- mean NVML GPU utilisation over the budget (sampled)
  gpu_tdp_w REAL,                  -- the GPU's default (maximum) power limit, per GPU
  ram_gb REAL,                     -- host memory installed
  train_size INTEGER, test_size INTEGER, image_size INTEGER,
  model_gflops_per_sample REAL,    -- forward GFLOPs per image (x3 for a training step)
  params INTEGER,
  -- schema version 2: where the run's wall time went, who ran it, the GPUs before it started
  pid INTEGER,                     -- the process that claimed the run ('running' rows)
  launcher TEXT,                   -- 'in-process' | 'torchrun' | 'warm-worker'
  worker_run_index INTEGER,        -- runs this process did before this one (0 = a cold start)
  phase_launch_s REAL,             -- process start (or the sweep's request) to the run's start
  phase_setup_s REAL,              -- meters, monitor, model, optimiser
  phase_data_s REAL,               -- dataset load/generation and the copy to the device
  phase_warmup_s REAL,             -- untimed warm-up steps
  phase_budget_s REAL,             -- the measured budget window
  phase_eval_s REAL,               -- evaluation
  phase_teardown_s REAL,           -- after evaluation until the row is stored
  idle_power_w REAL,               -- summed GPU power read just before the run (W)
  idle_temperature_c REAL,         -- hottest GPU just before the run (degrees C)
  idle_json TEXT,                  -- per GPU component: uuid, power_w, temperature_c
  gpu_utilization_basis TEXT,      -- v3: how gpu_utilization_percent was obtained
  step_marks_json TEXT,            -- v3: STEP's marks (samples, time_s, energy_j), with a fraction
  -- schema version 4: STEP's calibrated interval (wattlab.step.calibration), when it had one
  projected_energy_low_j REAL,
  projected_energy_high_j REAL,
  projection_interval_basis TEXT,  -- what the interval rests on, or why there is none
  -- schema version 5: runs of a command sweep (NULL for the built-in trainer's runs)
  exit_code INTEGER,               -- the command's exit code (128 + N: killed by signal N)
  stdout_path TEXT,                -- its standard output, kept beside the database
  stderr_path TEXT,                -- its standard error
  budget_window TEXT,              -- 'marked' (wattlab.budget) | 'whole process' (no mark)
  command_json TEXT,               -- argv, cwd, the marks with the child's own clocks
  -- schema version 6: when the claiming process started, so a reused pid is not taken for it
  pid_started_unix REAL,           -- psutil's create_time() of `pid` (s since the epoch)
  -- schema version 7: the synthetic task's version (NULL on CIFAR-10) and the recipe's
  synthetic_version INTEGER,
  recipe INTEGER,
  -- schema version 8: the share of energy_total_j a counter or sampled power gave (0..1)
  energy_measured_share REAL,
  -- schema version 9: the run's fingerprint, so `wattlab compare` compares like with like
  wattlab_version TEXT,            -- wattlab.__version__ of the process that ran it
  code_commit TEXT,                -- HEAD of the git checkout it ran in (NULL outside one)
  code_dirty INTEGER,              -- 1 when that checkout had uncommitted changes to tracked files
  torch_version TEXT,              -- torch.__version__ (NULL when torch was not loaded)
  cuda_version TEXT,               -- the CUDA torch was built with (torch.version.cuda)
  cudnn_version TEXT,              -- torch.backends.cudnn.version()
  -- schema version 10: the training tokens of a text model (the Hugging Face callback counts
  -- the attention mask's ones, else input_ids' elements, of every batch it trains on)
  tokens INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_config ON runs (sweep, config_hash, repetition, status);

CREATE TABLE IF NOT EXISTS windows (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name TEXT NOT NULL,              -- 'warmup' | 'epoch' | 'eval' | 'budget' | 'run'
  epoch INTEGER,                   -- 1-based, for 'epoch' windows
  start_s REAL,                    -- offset from the run's start
  duration_s REAL NOT NULL,
  samples INTEGER,
  energy_total_j REAL, energy_gpu_j REAL, energy_cpu_j REAL, energy_dram_j REAL,
  energy_other_j REAL,
  mean_power_w REAL,
  provenance TEXT,                 -- by share, as in runs.provenance (before version 8: weakest)
  short_window INTEGER NOT NULL DEFAULT 0, -- 1 when shorter than a counter's update period
  -- schema version 7: test accuracy (0..1) on the fixed subset, on 'epoch_eval' windows
  accuracy REAL
);

CREATE TABLE IF NOT EXISTS trace (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  t_s REAL NOT NULL,               -- offset from the run's start
  component TEXT NOT NULL,         -- 'gpu:0', 'cpu:package-0', ...
  power_w REAL
);
CREATE INDEX IF NOT EXISTS trace_by_run ON trace (run_id);

CREATE TABLE IF NOT EXISTS sweeps (
  name TEXT PRIMARY KEY,
  spec_json TEXT NOT NULL,
  spec_hash TEXT NOT NULL,
  order_seed INTEGER,
  created_at TEXT
);

-- Runs that a scheduler (SLURM) ran: which job, which result file was merged (once), and the
-- scheduler's own energy figure beside ours. Written in the same transaction as the run.
CREATE TABLE IF NOT EXISTS scheduler_jobs (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  scheduler TEXT NOT NULL,         -- 'slurm'
  job_id TEXT,                     -- '1234_5': array job 1234, task 5
  result_id TEXT NOT NULL UNIQUE,  -- the merged result file's id: merging twice stores nothing
  state TEXT,                      -- the scheduler's final state (COMPLETED, CANCELLED, ...)
  nodes TEXT,                      -- node list of the job
  consumed_energy_j REAL,          -- sacct ConsumedEnergyRaw of the job (J); NULL when not reported
  elapsed_s REAL,                  -- sacct ElapsedRaw (s)
  recorded_at TEXT                 -- UTC ISO-8601
);
