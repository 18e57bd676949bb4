// The FGD paper's fragmentation, as its simulator computes it, for `artefact_draw frag`:
// the functions below are copied from hkust-adsl/kubernetes-scheduler-simulator at commit
// 8f3d6417353c5083c6d56617f255fadd8dc306bc (Apache License 2.0) with their statements
// unchanged, so that every float comes out as the simulator's does; only what does not
// reach a float is left out (the log lines, the Pod objects GetPodResource reads, the
// FragAmount's node name) and the types keep only the fields these functions read.
//
//   - pkg/type/resource.go: PodResource, NodeResource, TargetPod, TargetPodList and their
//     Less, Len and Swap;
//   - pkg/utils/frag.go: FragRatioDataMap, FragAmount, NewFragAmount, AddByFragType,
//     FragAmountSumExceptQ3, NodeGpuShareFragAmount, NodeGpuShareFragAmountScore,
//     GetGpuFragMilliByNodeResAndPodRes, GetGpuMilliLeftTotal, CanNodeHostPodOnGpuMemory,
//     GetNodePodFrag, SortTargetPodInDecreasingCount, and GetTypicalPods from its count
//     of each shape on (its experiments' typicalPodsConfig: isInvolvedCpuPods true,
//     podPopularityThreshold 95, podIncreaseStep 1, no gpuResWeight);
//   - pkg/utils/utils.go: IsNodeAccessibleToPod, IsNodeAccessibleToPodByType.
package main

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

type PodResource struct {
	MilliCpu  int64
	MilliGpu  int64
	GpuNumber int
	GpuType   string
}

type NodeResource struct {
	MilliCpuLeft     int64
	MilliGpuLeftList []int64
	GpuType          string
}

type TargetPod struct {
	TargetPodResource PodResource
	Percentage        float64
}

type TargetPodList []TargetPod

func (p TargetPodList) Len() int { return len(p) }
func (p TargetPodList) Less(i, j int) bool {
	if p[i].Percentage != p[j].Percentage {
		return p[i].Percentage < p[j].Percentage
	} else { // to stabilize the order if two TargetPod has the same frequency
		return p[i].TargetPodResource.Less(p[j].TargetPodResource)
	}
}

func (tpr PodResource) Less(other PodResource) bool {
	if tpr.MilliCpu != other.MilliCpu {
		return tpr.MilliCpu < other.MilliCpu
	} else if tpr.MilliGpu != other.MilliGpu {
		return tpr.MilliGpu < other.MilliGpu
	} else if tpr.GpuNumber != other.GpuNumber {
		return tpr.GpuNumber < other.GpuNumber
	} else {
		return tpr.GpuType < other.GpuType
	}
}

func (p TargetPodList) Swap(i, j int) { p[i], p[j] = p[j], p[i] }

const (
	Q1LackBoth  = "q1_lack_both"
	Q2LackGpu   = "q2_lack_gpu"
	Q3Satisfied = "q3_satisfied"
	Q4LackCpu   = "q4_lack_cpu"
	XLSatisfied = "xl_satisfied"
	XRLackCPU   = "xr_lack_cpu"
	NoAccess    = "no_access"
)

var FragRatioDataMap = map[string]int{
	Q1LackBoth:  0,
	Q2LackGpu:   1,
	Q3Satisfied: 2,
	Q4LackCpu:   3,
	XLSatisfied: 4,
	XRLackCPU:   5,
	NoAccess:    6,
}

type FragAmount struct {
	Data []float64
}

func NewFragAmount(data []float64) FragAmount {
	fragAmount := FragAmount{Data: make([]float64, len(data))}
	copy(fragAmount.Data, data)
	return fragAmount
}

func (fa FragAmount) AddByFragType(fragType string, amount float64) error {
	if amount < 0 {
		return fmt.Errorf("bad freq")
	}
	if index, ok := FragRatioDataMap[fragType]; !ok {
		return fmt.Errorf("bad fragType")
	} else {
		fa.Data[index] += amount
		return nil
	}
}

func (fa FragAmount) FragAmountSumExceptQ3() (out float64) {
	for i := 0; i < len(FragRatioDataMap); i++ {
		if i != FragRatioDataMap[Q3Satisfied] {
			out += fa.Data[i]
		}
	}
	return out
}

func NodeGpuShareFragAmount(nodeRes NodeResource, typicalPods TargetPodList) FragAmount {
	data := make([]float64, len(FragRatioDataMap))
	fragAmount := NewFragAmount(data)
	for _, pod := range typicalPods {
		freq := pod.Percentage
		if freq < 0 || freq > 1 {
			continue
		}
		fragType := GetNodePodFrag(nodeRes, pod.TargetPodResource)
		gpuMilliLeftTotal := GetGpuMilliLeftTotal(nodeRes)
		if fragType == Q3Satisfied { // Part of GPUs are treated as Lack GPU fragment
			gpuFragMilli := GetGpuFragMilliByNodeResAndPodRes(nodeRes, pod.TargetPodResource)
			fragAmount.AddByFragType(Q2LackGpu, freq*float64(gpuFragMilli))
			fragAmount.AddByFragType(Q3Satisfied, freq*float64(gpuMilliLeftTotal-gpuFragMilli))
		} else { // Q1, Q2, XL, XR, NA => all idle GPU resources are treated as fragment
			fragAmount.AddByFragType(fragType, freq*float64(gpuMilliLeftTotal))
		}
	}
	return fragAmount
}

func NodeGpuShareFragAmountScore(nodeRes NodeResource, typicalPods TargetPodList) float64 {
	fragAmount := NodeGpuShareFragAmount(nodeRes, typicalPods)
	return fragAmount.FragAmountSumExceptQ3()
}

func GetGpuFragMilliByNodeResAndPodRes(nodeRes NodeResource, podRes PodResource) int64 {
	gpuFragMilli := int64(0)
	for _, milliGpuLeft := range nodeRes.MilliGpuLeftList {
		if milliGpuLeft < podRes.MilliGpu {
			gpuFragMilli += milliGpuLeft
		}
	}
	return gpuFragMilli
}

func GetGpuMilliLeftTotal(nodeRes NodeResource) (gpuMilliLeftTotal int64) {
	for _, gpuMilliLeft := range nodeRes.MilliGpuLeftList {
		gpuMilliLeftTotal += gpuMilliLeft
	}
	return gpuMilliLeftTotal
}

func SortTargetPodInDecreasingCount(tgtPodResMap map[PodResource]float64) TargetPodList {
	pl := make(TargetPodList, len(tgtPodResMap))
	i := 0
	for k, v := range tgtPodResMap {
		pl[i] = TargetPod{TargetPodResource: k, Percentage: v}
		i++
	}
	sort.Sort(sort.Reverse(pl))
	return pl
}

func CanNodeHostPodOnGpuMemory(nodeRes NodeResource, podRes PodResource) bool {
	gpuRequest := podRes.GpuNumber
	for _, gpuHostMem := range nodeRes.MilliGpuLeftList {
		if gpuHostMem >= podRes.MilliGpu {
			gpuRequest -= 1
			if gpuRequest <= 0 {
				return true
			}
		}
	}
	return false
}

func GetNodePodFrag(nodeRes NodeResource, podRes PodResource) string {
	if podRes.MilliGpu == 0 {
		if nodeRes.MilliCpuLeft >= podRes.MilliCpu {
			return XLSatisfied
		} else {
			return XRLackCPU
		}
	}

	if IsNodeAccessibleToPod(nodeRes, podRes) == false {
		return NoAccess
	}

	if CanNodeHostPodOnGpuMemory(nodeRes, podRes) {
		if nodeRes.MilliCpuLeft >= podRes.MilliCpu {
			return Q3Satisfied
		} else {
			return Q4LackCpu
		}
	} else {
		if nodeRes.MilliCpuLeft >= podRes.MilliCpu {
			return Q2LackGpu
		} else {
			return Q1LackBoth
		}
	}
}

func IsNodeAccessibleToPod(nodeRes NodeResource, podRes PodResource) bool {
	pt := podRes.GpuType
	nt := nodeRes.GpuType
	return IsNodeAccessibleToPodByType(nt, pt)
}

func IsNodeAccessibleToPodByType(nodeGpuType string, podGpuType string) bool {
	if len(podGpuType) == 0 {
		return true
	}
	if len(nodeGpuType) == 0 {
		return false // i.e., CPU node
	}
	podGpuTypeList := strings.Split(podGpuType, "|")
	cnt := 0
	for _, gpuType := range podGpuTypeList {
		if len(gpuType) == 0 {
			continue
		}
		cnt++
		if gpuType == nodeGpuType {
			return true
		}
	}
	if cnt > 0 { // pod requests at least one specific GPU type but node doesn't match
		return false
	} else { // pod actually doesn't request any specific GPU type
		return true
	}
}

// GetTypicalPods from its count of each shape on; allPods are the Pods' resources, as its
// loop over them reads each with GetPodResource.
func GetTypicalPods(allPods []PodResource) TargetPodList {
	const podPopularityThreshold, podIncreaseStep = 95, 1
	tgtPodResCntMap := map[PodResource]float64{}
	var total float64 = 0
	for _, tgtPodRes := range allPods {
		var weightedCnt float64 = 1
		if cnt, ok := tgtPodResCntMap[tgtPodRes]; ok {
			tgtPodResCntMap[tgtPodRes] = cnt + weightedCnt
		} else {
			tgtPodResCntMap[tgtPodRes] = weightedCnt
		}
		total += weightedCnt
	}

	tgtPodList := SortTargetPodInDecreasingCount(tgtPodResCntMap)
	var expectedNumPods float64 = 0
	expectedNumPods = float64(podPopularityThreshold) * total / 100.0
	var i, podResNum int
	var cumNumPods float64 = 0
	for cumNumPods < expectedNumPods {
		podResNum += podIncreaseStep
		for i < podResNum && i < len(tgtPodList) {
			cumNumPods += tgtPodList[i].Percentage
			tgtPodList[i].Percentage = tgtPodList[i].Percentage / total // normalized to 0.0-1.0 (100%)
			i += 1
		}
	}

	if i >= len(tgtPodList) {
		return tgtPodList
	} else {
		outPodList := tgtPodList[:i] // chopping at i-th pods
		// normalize Percentage to 0.0 - 1.0 after chopping i-th pods
		for j := 0; j < i; j++ {
			outPodList[j].Percentage /= cumNumPods / total
		}
		return outPodList
	}
}

// frag reads "pods N", N lines "CPU GPU_MILLI GPUS TYPE", "nodes M", M lines "CPU_LEFT
// TYPE LEFT,LEFT,..." (TYPE "-": none; LEFTs "-": no GPU) and prints the typical Pods as
// "CPU GPU_MILLI GPUS TYPE PERCENTAGE", then "nodes" and each node's
// NodeGpuShareFragAmountScore, every float as the shortest text that reads back the same.
func frag(in io.Reader, out io.Writer) error {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	count := func(word string) (int, error) {
		if !scanner.Scan() {
			return 0, fmt.Errorf("expected %q and a count", word)
		}
		fields := strings.Fields(scanner.Text())
		if len(fields) != 2 || fields[0] != word {
			return 0, fmt.Errorf("expected %q and a count, got %q", word, scanner.Text())
		}
		return strconv.Atoi(fields[1])
	}
	kind := func(text string) string {
		if text == "-" {
			return ""
		}
		return text
	}
	pods, err := count("pods")
	if err != nil {
		return err
	}
	resources := make([]PodResource, 0, pods)
	for range pods {
		var pod PodResource
		var gpuType string
		if !scanner.Scan() {
			return fmt.Errorf("expected %d pods", pods)
		}
		if _, err := fmt.Sscan(scanner.Text(), &pod.MilliCpu, &pod.MilliGpu, &pod.GpuNumber, &gpuType); err != nil {
			return fmt.Errorf("pod %q: %w", scanner.Text(), err)
		}
		pod.GpuType = kind(gpuType)
		resources = append(resources, pod)
	}
	typical := GetTypicalPods(resources)
	writer := bufio.NewWriter(out)
	defer writer.Flush()
	for _, pod := range typical {
		resource := pod.TargetPodResource
		gpuType := resource.GpuType
		if gpuType == "" {
			gpuType = "-"
		}
		fmt.Fprintln(writer, resource.MilliCpu, resource.MilliGpu, resource.GpuNumber, gpuType,
			strconv.FormatFloat(pod.Percentage, 'g', -1, 64))
	}
	nodes, err := count("nodes")
	if err != nil {
		return err
	}
	fmt.Fprintln(writer, "nodes")
	for range nodes {
		var node NodeResource
		var gpuType, lefts string
		if !scanner.Scan() {
			return fmt.Errorf("expected %d nodes", nodes)
		}
		if _, err := fmt.Sscan(scanner.Text(), &node.MilliCpuLeft, &gpuType, &lefts); err != nil {
			return fmt.Errorf("node %q: %w", scanner.Text(), err)
		}
		node.GpuType = kind(gpuType)
		if lefts != "-" {
			for _, text := range strings.Split(lefts, ",") {
				left, err := strconv.ParseInt(text, 10, 64)
				if err != nil {
					return fmt.Errorf("node %q: %w", scanner.Text(), err)
				}
				node.MilliGpuLeftList = append(node.MilliGpuLeftList, left)
			}
		}
		fmt.Fprintln(writer, strconv.FormatFloat(NodeGpuShareFragAmountScore(node, typical), 'g', -1, 64))
	}
	return scanner.Err()
}
