package main

import (
	"context"
	"fmt"
	"log"
	"sync"

	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	regpb "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration answers the kubelet's plugin watcher: who we are and where the DRA service listens.
type registration struct {
	regpb.UnimplementedRegistrationServer
	driver   string
	endpoint string
}

func (r *registration) GetInfo(context.Context, *regpb.InfoRequest) (*regpb.PluginInfo, error) {
	// Only v1: no health service is advertised, so a 1.37 kubelet never opens NodeWatchResources, and gRPC itself
	// answers Unimplemented if anyone asks anyway.
	return &regpb.PluginInfo{
		Type:              regpb.DRAPlugin,
		Name:              r.driver,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{drapb.DRAPluginService},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *regpb.RegistrationStatus) (*regpb.RegistrationStatusResponse, error) {
	if s.GetPluginRegistered() {
		log.Printf("registered with the kubelet")
	} else {
		log.Printf("the kubelet refused the registration: %s", s.GetError())
	}
	return &regpb.RegistrationStatusResponse{}, nil
}

// draPlugin prepares claims from what the API server says about them; it keeps no state of its own beyond the CDI
// spec files, so a restart (kill -9 included) changes nothing in its answers.
type draPlugin struct {
	drapb.UnimplementedDRAPluginServer
	opts options
	api  *apiClient
	cdi  cdiWriter
	// One prepare or unprepare at a time: the spec files of one claim are never written by two calls at once.
	mu sync.Mutex
}

func (p *draPlugin) NodePrepareResources(ctx context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.GetClaims() {
		devices, err := p.prepareOne(ctx, c)
		if err != nil {
			log.Printf("prepare %s/%s (%s): %v", c.GetNamespace(), c.GetName(), c.GetUid(), err)
			out.Claims[c.GetUid()] = &drapb.NodePrepareResourceResponse{Error: err.Error()}
			continue
		}
		out.Claims[c.GetUid()] = &drapb.NodePrepareResourceResponse{Devices: devices}
	}
	return out, nil
}

func (p *draPlugin) prepareOne(ctx context.Context, c *drapb.Claim) ([]*drapb.Device, error) {
	if p.api == nil {
		return nil, fmt.Errorf("no API server configured, so claim %s/%s cannot be looked up", c.GetNamespace(), c.GetName())
	}
	claim, err := p.api.getClaim(ctx, c.GetNamespace(), c.GetName())
	if err != nil {
		return nil, err
	}
	if claim.Metadata.UID != c.GetUid() {
		return nil, fmt.Errorf("claim %s/%s has UID %s, not %s (it was replaced)", c.GetNamespace(), c.GetName(), claim.Metadata.UID, c.GetUid())
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", c.GetNamespace(), c.GetName())
	}
	var ours []allocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == p.opts.driverName {
			ours = append(ours, r)
		}
	}
	if len(ours) == 0 {
		return nil, fmt.Errorf("claim %s/%s has no device of driver %s", c.GetNamespace(), c.GetName(), p.opts.driverName)
	}
	ids, err := p.cdi.writeClaim(c.GetUid(), ours)
	if err != nil {
		return nil, err
	}
	devices := make([]*drapb.Device, 0, len(ours))
	for i, r := range ours {
		devices = append(devices, &drapb.Device{
			RequestNames: []string{r.Request},
			PoolName:     r.Pool,
			DeviceName:   r.Device,
			CdiDeviceIds: []string{ids[i]},
		})
	}
	return devices, nil
}

func (p *draPlugin) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.GetClaims() {
		// An unknown claim has no spec file: removing nothing is success, as the contract asks.
		if err := p.cdi.removeClaim(c.GetUid()); err != nil {
			out.Claims[c.GetUid()] = &drapb.NodeUnprepareResourceResponse{Error: err.Error()}
			continue
		}
		out.Claims[c.GetUid()] = &drapb.NodeUnprepareResourceResponse{}
	}
	return out, nil
}
