//! The delegation every store wrapper shares: a wrapper that adds nothing to
//! blobs implements `BlobStore` by passing every call to its inner store.

/// Implements `corium_store::BlobStore` for `$wrapper` by delegating every
/// call to the store in its field `$inner` (anything that derefs to a
/// `BlobStore`).
///
/// `delegate_blobs!(Wrapper, inner, get = method)` delegates every call but
/// `get`, which calls `self.method(id)` (an async method with `get`'s
/// signature): for a wrapper that serves some reads itself.
#[macro_export]
macro_rules! delegate_blobs {
    ($wrapper:ty, $inner:ident) => {
        $crate::delegate_blobs!($wrapper, $inner, get = delegated_get);
        impl $wrapper {
            async fn delegated_get(
                &self,
                id: &$crate::__private::BlobId,
            ) -> Result<Option<Vec<u8>>, $crate::__private::StoreError> {
                self.$inner.get(id).await
            }
        }
    };
    ($wrapper:ty, $inner:ident, get = $get:ident) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::BlobStore for $wrapper {
            async fn put(
                &self,
                bytes: &[u8],
            ) -> Result<$crate::__private::BlobId, $crate::__private::StoreError> {
                self.$inner.put(bytes).await
            }
            async fn get(
                &self,
                id: &$crate::__private::BlobId,
            ) -> Result<Option<Vec<u8>>, $crate::__private::StoreError> {
                self.$get(id).await
            }
            async fn contains(
                &self,
                id: &$crate::__private::BlobId,
            ) -> Result<bool, $crate::__private::StoreError> {
                self.$inner.contains(id).await
            }
            async fn put_if_absent(
                &self,
                bytes: &[u8],
            ) -> Result<$crate::__private::BlobId, $crate::__private::StoreError> {
                self.$inner.put_if_absent(bytes).await
            }
            async fn delete(
                &self,
                id: &$crate::__private::BlobId,
            ) -> Result<(), $crate::__private::StoreError> {
                self.$inner.delete(id).await
            }
            async fn list(&self) -> Result<$crate::__private::BlobIdStream, $crate::__private::StoreError> {
                self.$inner.list().await
            }
            async fn modified_at(
                &self,
                id: &$crate::__private::BlobId,
            ) -> Result<Option<std::time::SystemTime>, $crate::__private::StoreError> {
                self.$inner.modified_at(id).await
            }
        }
    };
}
