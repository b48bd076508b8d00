# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_gpufill_global_optspecs
    string join \n v/verbose q/quiet log-format= h/help V/version
end

function __fish_gpufill_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_gpufill_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_gpufill_using_subcommand
    set -l cmd (__fish_gpufill_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c gpufill -n "__fish_gpufill_needs_command" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_needs_command" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_needs_command" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_needs_command" -s V -l version -d 'Print version'
complete -c gpufill -n "__fish_gpufill_needs_command" -f -a "run" -d 'Fill the selected GPUs until SIGINT/SIGTERM'
complete -c gpufill -n "__fish_gpufill_needs_command" -f -a "simulate" -d 'Run the real control loop against a simulated GPU, in virtual time'
complete -c gpufill -n "__fish_gpufill_needs_command" -f -a "status" -d 'Show each GPU: name, UUID, utilization, memory and compute processes, and whether MPS runs (its clients share SMs; other processes time-slice)'
complete -c gpufill -n "__fish_gpufill_needs_command" -f -a "config" -d 'Work with config files'
complete -c gpufill -n "__fish_gpufill_needs_command" -f -a "bench" -d 'Measure tracking, memory, power and yielding on this machine\'s GPU'
complete -c gpufill -n "__fish_gpufill_needs_command" -f -a "generate" -d 'Write the man pages or a shell\'s completions, generated from these flags'
complete -c gpufill -n "__fish_gpufill_needs_command" -f -a "healthcheck" -d 'Probe a running gpufill\'s /healthz (a container\'s HEALTHCHECK): exit 0 when it answers 200, 1 otherwise'
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l config -d 'TOML config file (see gpufill.example.toml); without it `run` reads /etc/gpufill/gpufill.toml where that exists' -r -F
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l target -d 'Utilization to hold, percent 0-100 [config: target_percent]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l controller -d 'Controller: pi (gpufill\'s PI controller, the default) or window (the original tool\'s 10 s rule, for comparison) [config: controller]' -r -f -a "pi\t''
window\t''"
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l metric -d 'What to hold at the target: NVML utilization or GPM SM utilization [config: metric]' -r -f -a "util\t''
sm\t''"
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l kernel -d 'The spin kernel [config: load.kernel]' -r -f -a "spin\t''
sleep\t''"
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l width -d 'Blocks (one warp each) per kernel [config: load.width_blocks]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l max-duty -d 'Upper bound of our own time share, percent [config: load.max_duty_percent]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l grace -d 'Seconds to stay idle after the last foreign process left [config: yield.grace_s]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l beside-live -d 'Beside live work without MPS: hold_off or fill_gaps [config: yield.beside_live]' -r -f -a "hold_off\t''
fill_gaps\t''"
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l max-cost -d 'fill_gaps: the most it may cost live work, percent [config: yield.max_cost_percent]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l tick-ms -d 'Loop tick in milliseconds; it must divide the launch period [config: tick_ms]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l period-ms -d 'Launch period in milliseconds, a multiple of the tick [config: load.period_ms]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l metrics -d 'Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9401; port 0 picks a free port (logged) [config: metrics.listen]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l gpus -d 'GPUs: "all", or a comma-separated list of NVML indices and UUIDs [config: gpus]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l duration -d 'Stop after this many seconds (for benchmarks and tests)' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l config -d 'TOML config file (see gpufill.example.toml); without it `run` reads /etc/gpufill/gpufill.toml where that exists' -r -F
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l target -d 'Utilization to hold, percent 0-100 [config: target_percent]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l controller -d 'Controller: pi (gpufill\'s PI controller, the default) or window (the original tool\'s 10 s rule, for comparison) [config: controller]' -r -f -a "pi\t''
window\t''"
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l metric -d 'What to hold at the target: NVML utilization or GPM SM utilization [config: metric]' -r -f -a "util\t''
sm\t''"
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l kernel -d 'The spin kernel [config: load.kernel]' -r -f -a "spin\t''
sleep\t''"
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l width -d 'Blocks (one warp each) per kernel [config: load.width_blocks]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l max-duty -d 'Upper bound of our own time share, percent [config: load.max_duty_percent]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l grace -d 'Seconds to stay idle after the last foreign process left [config: yield.grace_s]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l beside-live -d 'Beside live work without MPS: hold_off or fill_gaps [config: yield.beside_live]' -r -f -a "hold_off\t''
fill_gaps\t''"
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l max-cost -d 'fill_gaps: the most it may cost live work, percent [config: yield.max_cost_percent]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l tick-ms -d 'Loop tick in milliseconds; it must divide the launch period [config: tick_ms]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l period-ms -d 'Launch period in milliseconds, a multiple of the tick [config: load.period_ms]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l metrics -d 'Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9401; port 0 picks a free port (logged) [config: metrics.listen]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l duration -d 'Simulated seconds to run' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l foreign -d 'A foreign job, START-END:LOAD (seconds, seconds, percent of time it wants the GPU), e.g. 5-12:30. A fluid load, not kernels: beside --beside-live fill-gaps it shows our kernels no meetings (--training and --service model them). Repeatable' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l service -d 'A service that holds its context from START to END (seconds) and answers requests: START-END:EVERY:BURST, a burst of ResNet-50 requests at batch 1 (as the simulator models them: gpufill-sim\'s docs) lasting BURST seconds every EVERY seconds, e.g. 2-60:6:0.17; or START-END:RATE/s:LENGTHms, isolated requests, RATE a second (Poisson, at most 100) of LENGTH milliseconds each alone, e.g. 2-60:20/s:0.87ms; with :gpu after it, requests whose kernels fill every SM in a few waves (large matmuls), which under MPS pay for our long kernels, e.g. 2-60:5/s:2ms:gpu. The report gives its requests\' latency against alone. Repeatable' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l training -d 'A training job that holds its context from START to END (seconds) and waits on its input: steps that keep the GPU busy STEP_MS each, in kernels of 300 us with 20 us launch gaps between them (a model choice for PyTorch eager training), in 10 pieces with host-side gaps of 0.45 ms on average between them (as a ResNet-18 step\'s were measured), then WAIT_MS on its input, one step after another, e.g. 2-300:12:25. The report gives how much our kernels slowed its step rate. Repeatable' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l csv -d 'Write every tick to this CSV file: t_s,target,util,duty,state' -r -F
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l sample-ms -d 'NVML sampling period of the simulated GPU, in milliseconds' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l mps-quit-at -d 'With --mps: the MPS control daemon is told to quit at this second. gpufill leaves it as `run` does (at its next looks), fills on without MPS under its yield policy, and the daemon exits once its last client has gone' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l every -d 'Seconds between rows of the printed table' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l random-foreign -d 'Random foreign jobs arriving at this mean rate per hour (Poisson), each staying 10 s to 10 min and wanting 20-100 % of the GPU; reproducible with --seed' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l seed -d 'Seed of --random-foreign and --host-jitter' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l start-time -d 'Local time of day at the start, HH:MM, for schedule windows (default: the host\'s local time)' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l mps -d 'Simulate an MPS server (kernels of different processes run together)'
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l pid-namespace -d 'Simulate gpufill inside a PID namespace of its own (a container without hostPID): foreign jobs are not listed; device memory, utilization and per-process samples (late, as measured: docs/benchmarks.md) still show them'
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l host-jitter -d 'Simulate the host\'s own jitter in our kernels\' timing, as on the hosts where gpufill once paused with nobody there (stalled launches, slower starts after an idle spell, as measured: docs/benchmarks.md, "Start jitter on an empty GPU"). Every group of our kernels is then judged by the launcher\'s own rule (seeded by --seed)'
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -l realtime -d 'Pace virtual time at wall-clock speed (to scrape --metrics or send SIGHUP while it runs)'
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand simulate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand status" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand status" -l json -d 'Print one JSON object instead of the table'
complete -c gpufill -n "__fish_gpufill_using_subcommand status" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand status" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and not __fish_seen_subcommand_from check" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and not __fish_seen_subcommand_from check" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and not __fish_seen_subcommand_from check" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and not __fish_seen_subcommand_from check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and not __fish_seen_subcommand_from check" -f -a "check" -d 'Validate a config file and print the resolved settings (defaults when no file)'
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and __fish_seen_subcommand_from check" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and __fish_seen_subcommand_from check" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and __fish_seen_subcommand_from check" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand config; and __fish_seen_subcommand_from check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l gpu -d 'The GPU to measure: NVML index or UUID [default: the first GPU `run` would fill]' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l config -d 'TOML config file: the loop, load and yield settings to measure (its target and GPUs are not used; `metric` must be `util`)' -r -F
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l targets -d 'Targets to hold one after the other, percent' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l seconds -d 'Seconds per target' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l out -d 'Directory for bench.svg, bench.csv and bench.json (created if missing)' -r -F
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l no-yield -d 'Skip the yield test'
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l sim -d 'Run on the simulated GPU, in virtual time (no GPU needed)'
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -l force -d 'Measure even while other processes use the GPU (they are ignored; the numbers will be off)'
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand bench" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and not __fish_seen_subcommand_from man completions" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and not __fish_seen_subcommand_from man completions" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and not __fish_seen_subcommand_from man completions" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and not __fish_seen_subcommand_from man completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and not __fish_seen_subcommand_from man completions" -f -a "man" -d 'Write gpufill.1 and a page per subcommand (gpufill-run.1, ...) into DIR'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and not __fish_seen_subcommand_from man completions" -f -a "completions" -d 'Print SHELL\'s completion script to standard output'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and __fish_seen_subcommand_from man" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and __fish_seen_subcommand_from man" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and __fish_seen_subcommand_from man" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and __fish_seen_subcommand_from man" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and __fish_seen_subcommand_from completions" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and __fish_seen_subcommand_from completions" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and __fish_seen_subcommand_from completions" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand generate; and __fish_seen_subcommand_from completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpufill -n "__fish_gpufill_using_subcommand healthcheck" -l metrics -d 'The metrics address of the gpufill to probe, as given to `run --metrics`; an unspecified address (0.0.0.0, or :: in IPv6) is probed on loopback' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand healthcheck" -l timeout -d 'Seconds to wait for the answer' -r
complete -c gpufill -n "__fish_gpufill_using_subcommand healthcheck" -l log-format -d 'Log lines as text, or as JSON objects (one a line, for a log collector)' -r -f -a "text\t'Human-readable lines'
json\t'One JSON object a line: `timestamp`, `level`, `fields` (with `message`), and `span`/`spans` (the GPU\'s `gpu` index)'"
complete -c gpufill -n "__fish_gpufill_using_subcommand healthcheck" -s v -l verbose -d 'More log output (-v: debug, -vv: trace); RUST_LOG overrides'
complete -c gpufill -n "__fish_gpufill_using_subcommand healthcheck" -s q -l quiet -d 'Less log output (-q: warnings only, -qq: errors only)'
complete -c gpufill -n "__fish_gpufill_using_subcommand healthcheck" -s h -l help -d 'Print help (see more with \'--help\')'
