//! Read-only catalog calls: instance types, subnets, security groups, key
//! pairs and images.

use super::api::{
    self, Flavor, FlavorList, Image, ImageList, KeyPair, KeyPairList, SecurityGroup,
    SecurityGroupList, Subnet, SubnetList,
};
use super::config::Service;
use super::error::Error;
use super::transport::{Call, Transport};

/// Instance types (flavors) of the Virtual Machine service.
pub struct Flavors<'a> {
    pub(crate) transport: &'a Transport,
}

impl Flavors<'_> {
    /// Every flavor, with per-zone availability.
    pub async fn list(&self) -> Result<Vec<Flavor>, Error> {
        let call = Call::get(Service::Bcs, api::paths::FLAVORS, "flavors");
        self.transport.list_all::<FlavorList>(call).await
    }
}

/// VPC subnets.
pub struct Subnets<'a> {
    pub(crate) transport: &'a Transport,
}

impl Subnets<'_> {
    pub async fn list(&self) -> Result<Vec<Subnet>, Error> {
        let call = Call::get(Service::Vpc, api::paths::SUBNETS, "subnets");
        self.transport.list_all::<SubnetList>(call).await
    }
}

/// Network security groups.
pub struct SecurityGroups<'a> {
    pub(crate) transport: &'a Transport,
}

impl SecurityGroups<'_> {
    pub async fn list(&self) -> Result<Vec<SecurityGroup>, Error> {
        let call = Call::get(
            Service::Network,
            api::paths::SECURITY_GROUPS,
            "security groups",
        );
        self.transport.list_all::<SecurityGroupList>(call).await
    }
}

/// Key pairs of the Virtual Machine service.
pub struct KeyPairs<'a> {
    pub(crate) transport: &'a Transport,
}

impl KeyPairs<'_> {
    pub async fn list(&self) -> Result<Vec<KeyPair>, Error> {
        let call = Call::get(Service::Bcs, api::paths::KEYPAIRS, "key pairs");
        self.transport.list_all::<KeyPairList>(call).await
    }
}

/// Images of the Image service.
pub struct Images<'a> {
    pub(crate) transport: &'a Transport,
}

impl Images<'_> {
    pub async fn list(&self) -> Result<Vec<Image>, Error> {
        let call = Call::get(Service::Image, api::paths::IMAGES, "images");
        self.transport.list_all::<ImageList>(call).await
    }
}
