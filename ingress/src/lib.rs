//! Corium Fleet ingress: the stateless tier that will be the one client
//! address (reads the route, keeps an owner cache, forwards one hop over
//! mTLS). Not built yet; see the ingress issue.
