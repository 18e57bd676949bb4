// Command celeval evaluates CEL expressions in the environment the API server
// gives admission policies (the same libraries, version and cost tracking as
// the pinned kube-apiserver), so tests can check CEL builders without a cluster.
//
// Input on stdin, either
//
//	{"cases": [{"expression": "...", "bindings": {"name": value}}]}: every binding is
//	declared as a dynamic variable; the output has one {"value", "error", "cost"} per case;
//
//	{"policy": spec, "objects": [object, ...]}: a Mutating- or ValidatingAdmissionPolicy
//	spec run on each object as the API server runs it (matchConditions, variables in
//	order, then mutations, validations and audit annotations, with `object` and
//	`variables`, and `request` from "requests" when given); the output has one run per object.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/mutation"
)

type testCase struct {
	Expression string                 `json:"expression"`
	Bindings   map[string]interface{} `json:"bindings"`
}

type result struct {
	Value interface{} `json:"value,omitempty"`
	Error string      `json:"error,omitempty"`
	Cost  uint64      `json:"cost"`
}

func main() {
	decoder := json.NewDecoder(os.Stdin)
	decoder.UseNumber()
	var input struct {
		Cases   []testCase    `json:"cases"`
		Policy  *policySpec   `json:"policy"`
		Objects []interface{} `json:"objects"`
		// The admission request of each object (its namespace...), for `request`.
		Requests []interface{} `json:"requests"`
	}
	if err := decoder.Decode(&input); err != nil {
		fmt.Fprintf(os.Stderr, "celeval: reading the input: %v\n", err)
		os.Exit(2)
	}
	var output interface{}
	if input.Policy != nil {
		output = runPolicy(*input.Policy, input.Objects, input.Requests)
	} else {
		results := make([]result, len(input.Cases))
		for i, c := range input.Cases {
			results[i] = evaluate(c)
		}
		output = results
	}
	if err := json.NewEncoder(os.Stdout).Encode(output); err != nil {
		fmt.Fprintf(os.Stderr, "celeval: writing the results: %v\n", err)
		os.Exit(2)
	}
}

// envs holds one environment per set of binding names: building one is the slow part.
var envs = map[string]*cel.Env{}

// programs holds each expression compiled once per environment.
var programs = map[string]cel.Program{}

func evaluate(c testCase) result {
	names := make([]string, 0, len(c.Bindings))
	for name := range c.Bindings {
		names = append(names, name)
	}
	sort.Strings(names)
	activation := map[string]interface{}{}
	for _, name := range names {
		activation[name] = types.DefaultTypeAdapter.NativeToValue(plain(c.Bindings[name]))
	}
	key := strings.Join(names, ",")
	env, found := envs[key]
	if !found {
		var err error
		if env, err = newEnv(names); err != nil {
			return result{Error: "environment: " + err.Error()}
		}
		envs[key] = env
	}
	program, found := programs[key+"\x00"+c.Expression]
	if !found {
		var err error
		if program, err = compile(env, c.Expression); err != nil {
			return result{Error: err.Error()}
		}
		programs[key+"\x00"+c.Expression] = program
	}
	return run(program, activation)
}

// newEnv is the API server's environment for new expressions (the compatibility
// version, as on policy creation) with `names` as dynamic variables.
func newEnv(names []string) (*cel.Env, error) {
	options := []cel.EnvOption{
		// What a mutating policy's JSON Patch expressions have besides the base libraries.
		common.ResolverEnvOption(&mutation.DynamicTypeResolver{}),
		library.JSONPatch(),
	}
	for _, name := range names {
		options = append(options, cel.Variable(name, cel.DynType))
	}
	base := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	extended, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        options,
	})
	if err != nil {
		return nil, err
	}
	return extended.Env(environment.NewExpressions)
}

func compile(env *cel.Env, expression string) (cel.Program, error) {
	ast, issues := env.Compile(expression)
	if issues != nil && issues.Err() != nil {
		return nil, fmt.Errorf("compile: %v\nin: %s", issues.Err(), expression)
	}
	program, err := env.Program(ast, cel.CostTracking(&library.CostEstimator{}))
	if err != nil {
		return nil, fmt.Errorf("program: %v", err)
	}
	return program, nil
}

func run(program cel.Program, activation map[string]interface{}) result {
	value, details, err := program.Eval(activation)
	var cost uint64
	if details != nil && details.ActualCost() != nil {
		cost = *details.ActualCost()
	}
	if err != nil {
		return result{Error: "eval: " + err.Error(), Cost: cost}
	}
	native, err := toJSON(value)
	if err != nil {
		return result{Error: "result: " + err.Error(), Cost: cost}
	}
	return result{Value: native, Cost: cost}
}

// plain turns JSON numbers into int64 (every number the tests send is whole).
func plain(value interface{}) interface{} {
	switch v := value.(type) {
	case json.Number:
		n, err := v.Int64()
		if err != nil {
			return v.String()
		}
		return n
	case map[string]interface{}:
		out := make(map[string]interface{}, len(v))
		for k, item := range v {
			out[k] = plain(item)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(v))
		for i, item := range v {
			out[i] = plain(item)
		}
		return out
	}
	return value
}

func toJSON(value ref.Val) (interface{}, error) {
	switch v := value.(type) {
	case types.String, types.Int, types.Bool, types.Double, types.Uint:
		return v.Value(), nil
	case types.Null:
		return nil, nil
	case traits.Lister:
		var out []interface{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			item, err := toJSON(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, item)
		}
		if out == nil {
			out = []interface{}{}
		}
		return out, nil
	case traits.Mapper:
		out := map[string]interface{}{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			key := it.Next()
			item, err := toJSON(v.Get(key))
			if err != nil {
				return nil, err
			}
			out[fmt.Sprint(key.Value())] = item
		}
		return out, nil
	}
	if patch, err := value.ConvertToNative(reflect.TypeOf(&mutation.JSONPatchVal{})); err == nil {
		op := patch.(*mutation.JSONPatchVal)
		out := map[string]interface{}{"op": op.Op, "path": op.Path}
		if op.Val != nil {
			item, err := toJSON(op.Val)
			if err != nil {
				return nil, err
			}
			out["value"] = item
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot show a %s", value.Type().TypeName())
}

type named struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

type policySpec struct {
	MatchConditions []named `json:"matchConditions"`
	Variables       []named `json:"variables"`
	Mutations       []struct {
		JSONPatch struct {
			Expression string `json:"expression"`
		} `json:"jsonPatch"`
	} `json:"mutations"`
	Validations []struct {
		Expression        string `json:"expression"`
		MessageExpression string `json:"messageExpression"`
	} `json:"validations"`
	AuditAnnotations []struct {
		Key             string `json:"key"`
		ValueExpression string `json:"valueExpression"`
	} `json:"auditAnnotations"`
}

type policyRun struct {
	Matched   bool                   `json:"matched"`
	Variables map[string]interface{} `json:"variables"`
	Patch     interface{}            `json:"patch,omitempty"`
	Messages  []interface{}          `json:"messages,omitempty"`
	Audit     map[string]interface{} `json:"audit,omitempty"`
	// The cost of the evaluation as the API server counts it against its budget.
	Cost  uint64 `json:"cost"`
	Error string `json:"error,omitempty"`
}

type step struct {
	name    string
	program cel.Program
}

func runPolicy(spec policySpec, objects, requests []interface{}) []policyRun {
	env, err := newEnv([]string{"object", "request", "variables"})
	if err != nil {
		return []policyRun{{Error: "environment: " + err.Error()}}
	}
	var firstErr error
	programs := func(exprs []named) []step {
		var steps []step
		for _, e := range exprs {
			program, err := compile(env, e.Expression)
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", e.Name, err)
			}
			steps = append(steps, step{e.Name, program})
		}
		return steps
	}
	var patchExprs, checkExprs, messageExprs, auditExprs []named
	for _, m := range spec.Mutations {
		patchExprs = append(patchExprs, named{"mutation", m.JSONPatch.Expression})
	}
	for i, v := range spec.Validations {
		checkExprs = append(checkExprs, named{fmt.Sprintf("validation %d", i), v.Expression})
		messageExprs = append(messageExprs, named{fmt.Sprintf("message %d", i), v.MessageExpression})
	}
	for _, a := range spec.AuditAnnotations {
		auditExprs = append(auditExprs, named{a.Key, a.ValueExpression})
	}
	conditions, variables := programs(spec.MatchConditions), programs(spec.Variables)
	patches, checks, messages, audits := programs(patchExprs), programs(checkExprs), programs(messageExprs), programs(auditExprs)
	if firstErr != nil {
		return []policyRun{{Error: firstErr.Error()}}
	}
	runs := make([]policyRun, len(objects))
	for i, object := range objects {
		var request interface{} = map[string]interface{}{}
		if i < len(requests) {
			request = requests[i]
		}
		runs[i] = runOne(object, request, conditions, variables, patches, checks, messages, audits)
	}
	return runs
}

func runOne(object, request interface{}, conditions, variables, patches, checks, messages, audits []step) policyRun {
	out := policyRun{Matched: true, Variables: map[string]interface{}{}}
	values := map[string]interface{}{}
	activation := map[string]interface{}{
		"object":    types.DefaultTypeAdapter.NativeToValue(plain(object)),
		"request":   types.DefaultTypeAdapter.NativeToValue(plain(request)),
		"variables": values,
	}
	eval := func(s step) (ref.Val, bool) {
		value, details, err := s.program.Eval(activation)
		if details != nil && details.ActualCost() != nil {
			out.Cost += *details.ActualCost()
		}
		if err != nil {
			out.Error = fmt.Sprintf("%s: %v", s.name, err)
			return nil, false
		}
		return value, true
	}
	for _, s := range conditions {
		value, ok := eval(s)
		if !ok {
			return out
		}
		if value != types.True {
			out.Matched = false
			return out
		}
	}
	for _, s := range variables {
		value, ok := eval(s)
		if !ok {
			return out
		}
		values[s.name] = value
		shown, err := toJSON(value)
		if err != nil {
			out.Error = fmt.Sprintf("%s: %v", s.name, err)
			return out
		}
		out.Variables[s.name] = shown
	}
	for _, s := range patches {
		value, ok := eval(s)
		if !ok {
			return out
		}
		shown, err := toJSON(value)
		if err != nil {
			out.Error = fmt.Sprintf("%s: %v", s.name, err)
			return out
		}
		out.Patch = shown
	}
	for i, s := range checks {
		value, ok := eval(s)
		if !ok {
			return out
		}
		if value == types.True {
			continue
		}
		message, ok := eval(messages[i])
		if !ok {
			return out
		}
		out.Messages = append(out.Messages, message.Value())
	}
	for _, s := range audits {
		value, ok := eval(s)
		if !ok {
			return out
		}
		// As the API server: null or a blank string leaves the annotation out.
		text, isString := value.Value().(string)
		if value != types.NullValue && (!isString || strings.TrimSpace(text) != "") {
			if out.Audit == nil {
				out.Audit = map[string]interface{}{}
			}
			out.Audit[s.name] = value.Value()
		}
	}
	return out
}
