package main

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

type quantityRequest struct {
	// Values are raw JSON values (strings or numbers), decoded as the API server decodes a
	// quantity field: Quantity.UnmarshalJSON.
	Values []json.RawMessage `json:"values"`
}

type quantityResult struct {
	Error     *string `json:"error"`
	Exact     string  `json:"exact,omitempty"`     // the exact value as <unscaled>e<exponent>, never expanded
	Canonical string  `json:"canonical,omitempty"` // what the API server writes back (Quantity.String)
}

func quantityVerb(in []byte) (any, error) {
	var req quantityRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	out := make([]quantityResult, 0, len(req.Values))
	for _, raw := range req.Values {
		var q resource.Quantity
		if err := q.UnmarshalJSON(raw); err != nil {
			out = append(out, quantityResult{Error: errorText(err)})
			continue
		}
		dec := q.AsDec()
		result := quantityResult{Exact: fmt.Sprintf("%se%d", dec.UnscaledBig().String(), -int64(dec.Scale()))}
		if dec.Scale() > -1000 && dec.Scale() < 1000 { // beyond that Quantity.String writes every digit out
			result.Canonical = q.String()
		}
		out = append(out, result)
	}
	return map[string]any{"results": out}, nil
}
