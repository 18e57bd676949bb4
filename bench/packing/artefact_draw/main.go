// Command artefact_draw prints, one task name per line, the workload the FGD paper's
// simulator submits for a seed: hkust-adsl/kubernetes-scheduler-simulator at commit
// 8f3d6417353c5083c6d56617f255fadd8dc306bc, run as its experiments run it
// (--shuffle-pod=true, -tune <ratio> -tuneseed <seed>). It takes its random numbers from
// Go's math/rand as the simulator does, in the same order:
//
//   - pkg/simulator/core.go: rand.Seed(seed), then one rand.Int() (an argument of a debug
//     log line, evaluated whatever the log level);
//   - pkg/simulator/simulator.go, SortClusterPods: the tasks sorted by name, then
//     rand.Shuffle;
//   - TunePodsByNodeTotalResource: tuneDownPods removes tasks at rand.Intn(len) until the
//     GPU demand is at most ratio x the cluster's; tuneUpPods appends copies of the trace's
//     tasks (in the file's order) at rand.Intn(len) until one would pass it, comparing one
//     GPU's share of the copy (MilliGpu), not its whole demand, as the simulator does.
//
// Given the cluster's node count too, it then prints a line "nodes" and, for each node in
// the order of their names, the number the simulator puts before its name: its
// syncClusterResourceList (pkg/simulator/simulator.go) sorts the nodes by name and names
// the i-th "%04d-" + name with rand.Perm(nodes)[i], so kube-scheduler's ties, which its
// selectHost gives the lowest name, go by a random order of the nodes, not the trace's.
// Ten draws come between the tuning and that permutation: client-go's reflectors take one
// rand.Float64 each as they start a watch (tools/cache/reflector.go, ListAndWatch), and the
// simulator's informers start eleven about when the nodes are named. Ten before it is what
// reproduces the names the simulator, built and run here at that commit, gave its nodes on
// every task list and seed tried (five); the draws race with the naming, so a run of it
// could number its nodes otherwise.
//
// Usage: go run . TASKS_CSV SEED CLUSTER_GPUS RATIO [NODES]
//
// `go run . frag` instead reads Pods and nodes on its standard input and prints the
// simulator's typical Pods and each node's fragmentation, as frag.go says.
package main

import (
	"encoding/csv"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
)

const milli = 1000

// The draws the simulator's informers take between the tuning and the nodes' names.
const informerDraws = 10

type task struct {
	name string
	// One GPU's share (MilliGpu) and the GPUs (GpuNumber), as GetPodResource reads them.
	gpuMilli, gpus int64
}

func (t task) demand() int64 { return t.gpuMilli * t.gpus }

func read(path string) ([]task, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	rows, err := csv.NewReader(file).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	column := map[string]int{}
	for index, name := range rows[0] {
		column[name] = index
	}
	for _, name := range []string{"name", "num_gpu", "gpu_milli"} {
		if _, ok := column[name]; !ok {
			return nil, fmt.Errorf("%s: no %s column", path, name)
		}
	}
	tasks := make([]task, 0, len(rows)-1)
	for line, row := range rows[1:] {
		gpus, err1 := strconv.ParseInt(row[column["num_gpu"]], 10, 64)
		share, err2 := strconv.ParseInt(row[column["gpu_milli"]], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s, line %d: num_gpu and gpu_milli must be integers", path, line+2)
		}
		// data/pod_csv_to_yaml.py: no GPU annotations without GPUs; a share above a
		// whole GPU is a whole GPU, below zero none.
		switch {
		case gpus == 0:
			share = 0
		case share > milli:
			share = milli
		case share < 0:
			share = 0
		}
		tasks = append(tasks, task{row[column["name"]], share, gpus})
	}
	return tasks, nil
}

func draw(random *rand.Rand, tasks []task, clusterGpus int64, ratio float64) []task {
	_ = random.Int()
	chosen := append([]task(nil), tasks...)
	sort.Slice(chosen, func(i, j int) bool { return chosen[i].name < chosen[j].name })
	random.Shuffle(len(chosen), func(i, j int) { chosen[i], chosen[j] = chosen[j], chosen[i] })
	var total int64
	for _, t := range chosen {
		total += t.demand()
	}
	target := ratio * float64(clusterGpus*milli)
	switch {
	case float64(total) > target:
		for float64(total) > target && len(chosen) > 0 {
			index := random.Intn(len(chosen))
			total -= chosen[index].demand()
			chosen = append(chosen[:index], chosen[index+1:]...)
		}
	case float64(total) < target:
		for {
			copied := tasks[random.Intn(len(tasks))]
			if float64(total+copied.gpuMilli) > target {
				break
			}
			total += copied.demand()
			chosen = append(chosen, copied)
		}
	}
	return chosen
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "frag" {
		if err := frag(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "artefact_draw frag:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 5 && len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: artefact_draw TASKS_CSV SEED CLUSTER_GPUS RATIO [NODES] | artefact_draw frag")
		os.Exit(2)
	}
	nodes := int64(0)
	if len(os.Args) == 6 {
		var err error
		nodes, err = strconv.ParseInt(os.Args[5], 10, 64)
		if err != nil || nodes <= 0 {
			fmt.Fprintln(os.Stderr, "artefact_draw: NODES must be an integer above 0")
			os.Exit(2)
		}
	}
	seed, err1 := strconv.ParseInt(os.Args[2], 10, 64)
	gpus, err2 := strconv.ParseInt(os.Args[3], 10, 64)
	ratio, err3 := strconv.ParseFloat(os.Args[4], 64)
	if err1 != nil || err2 != nil || err3 != nil || gpus <= 0 || ratio <= 0 {
		fmt.Fprintln(os.Stderr, "artefact_draw: SEED and CLUSTER_GPUS must be integers, CLUSTER_GPUS and RATIO above 0")
		os.Exit(2)
	}
	tasks, err := read(os.Args[1])
	if err != nil || len(tasks) == 0 {
		fmt.Fprintln(os.Stderr, "artefact_draw:", err)
		os.Exit(1)
	}
	random := rand.New(rand.NewSource(seed))
	for _, t := range draw(random, tasks, gpus, ratio) {
		fmt.Println(t.name)
	}
	if nodes == 0 {
		return
	}
	for range informerDraws {
		random.Float64()
	}
	fmt.Println("nodes")
	for _, number := range random.Perm(int(nodes)) {
		fmt.Println(number)
	}
}
